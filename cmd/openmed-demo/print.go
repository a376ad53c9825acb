package main

import (
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/openmed/openmed-operator/health/snapshot"
)

// stageWidth pads stage names so the lines of a CI log line up.
const stageWidth = 15

// printer writes the progress display: plain lines with a wall-clock time
// and the stage name, readable in a terminal and in a CI log alike.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func newPrinter(w io.Writer) *printer { return &printer{w: w} }

// line prints one progress line for stage.
func (p *printer) line(stage, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s %-*s %s\n", time.Now().Format("15:04:05.000"), stageWidth, stage, msg)
}

// plain prints text as it is.
func (p *printer) plain(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, msg)
}

// result is how one stage went, for the summary.
type result struct {
	stage   string
	outcome string
	took    time.Duration
	// final is the model's state at the end of the stage; nil for set-up
	// stages and stages that did not run.
	final *snapshot.Snapshot
	note  string
}

// Stage outcomes.
const (
	outcomeOK      = "ok"
	outcomeSkipped = "skipped"
	outcomeFailed  = "FAILED"
	outcomeNotRun  = "not run"
)

// setupTimer times the set-up steps, each from the end of the one before.
type setupTimer struct {
	p       *printer
	last    time.Time
	results []result
}

func (p *printer) beginSetup() *setupTimer {
	return &setupTimer{p: p, last: time.Now()}
}

// done records a finished set-up step and prints what it did.
func (t *setupTimer) done(stage, msg string) {
	now := time.Now()
	t.results = append(t.results, result{stage: stage, outcome: outcomeOK, took: now.Sub(t.last)})
	t.last = now
	t.p.line(stage, msg)
}

// summary prints the table of every step with its timing and final state.
func (p *printer) summary(setup, stages []result, total time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w)
	fmt.Fprintln(p.w, "== summary")
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tresult\ttook\tphase\tactive\tReady\tArgo CD\tkstatus\tnote")
	for _, r := range append(append([]result{}, setup...), stages...) {
		phase, active, ready, argo, ks := "", "", "", "", ""
		if s := r.final; s != nil {
			phase, active, ready = string(s.Phase), s.ActiveVersion, s.Condition("Ready")
			argo, ks = string(s.Health.Code), string(s.KStatus)
		}
		took := ""
		if r.outcome != outcomeNotRun && r.outcome != outcomeSkipped {
			took = r.took.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.stage, r.outcome, took, phase, active, ready, argo, ks, r.note)
	}
	_ = tw.Flush()
	fmt.Fprintf(p.w, "total %s\n", total.Round(10*time.Millisecond))
}
