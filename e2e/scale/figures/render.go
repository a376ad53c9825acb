package figures

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// JSONPath is where `make bench-scale` writes its File by default, from
// the repository's root; the docs' blocks are generated from it.
const JSONPath = "docs/scale/results.json"

// VerificationJSONPath is where the golden request's runs are kept, from
// the repository's root: `make bench-scale N=100 BAKE=off VERIFY=on
// BENCH_JSON=docs/scale/verification.json`, the same N without and with
// the golden request.
const VerificationJSONPath = "docs/scale/verification.json"

// Renderer is a generated block: the File it is rendered from (its path
// from the repository's root), and how.
type Renderer struct {
	Path   string
	Render func(*File) (string, error)
}

// Renderers are the generated blocks, by name: the measured-figures table
// of docs/scale.md, the one-row headline of README.md, and the golden
// request's table of docs/scale.md.
var Renderers = map[string]Renderer{
	"scale-table":        {JSONPath, Table},
	"scale-headline":     {JSONPath, Headline},
	"scale-verification": {VerificationJSONPath, VerificationTable},
	"fleet-waves":        {FleetJSONPath, FleetTable},
}

// Block markers: a generated block is the lines between a begin and an end
// marker of the same name, each marker on a line of its own.
const (
	beginPrefix = "<!-- BEGIN GENERATED: "
	endPrefix   = "<!-- END GENERATED: "
	markerEnd   = " -->"
)

// Span is a generated block of a document: its name, and the byte offsets
// of its content (after the begin marker's line, up to the end marker).
type Span struct {
	Name       string
	Start, End int
	// Outer is the offsets of the block with its markers.
	OuterStart, OuterEnd int
}

// Spans finds the generated blocks of doc, in order. A begin marker without
// its end, or blocks that nest, are errors.
func Spans(doc string) ([]Span, error) {
	var out []Span
	pos := 0
	for {
		i := strings.Index(doc[pos:], beginPrefix)
		if i < 0 {
			break
		}
		i += pos
		lineEnd := strings.IndexByte(doc[i:], '\n')
		if lineEnd < 0 {
			return nil, fmt.Errorf("begin marker at byte %d: no end of line", i)
		}
		line := doc[i : i+lineEnd]
		name, ok := strings.CutSuffix(strings.TrimPrefix(line, beginPrefix), markerEnd)
		if !ok || name == "" {
			return nil, fmt.Errorf("malformed begin marker %q", line)
		}
		start := i + lineEnd + 1
		end := strings.Index(doc[start:], endPrefix+name+markerEnd)
		if end < 0 {
			return nil, fmt.Errorf("block %s has no end marker", name)
		}
		end += start
		if j := strings.Index(doc[start:end], beginPrefix); j >= 0 {
			return nil, fmt.Errorf("block %s holds another begin marker", name)
		}
		outerEnd := end + len(endPrefix+name+markerEnd)
		out = append(out, Span{Name: name, Start: start, End: end, OuterStart: i, OuterEnd: outerEnd})
		pos = outerEnd
	}
	if strings.Contains(stripSpans(doc, out), endPrefix) {
		return nil, fmt.Errorf("an end marker without its begin marker")
	}
	return out, nil
}

func stripSpans(doc string, spans []Span) string {
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(doc[last:s.OuterStart])
		last = s.OuterEnd
	}
	b.WriteString(doc[last:])
	return b.String()
}

// Outside is doc without its generated blocks, markers included.
func Outside(doc string) (string, error) {
	spans, err := Spans(doc)
	if err != nil {
		return "", err
	}
	return stripSpans(doc, spans), nil
}

// Regenerate rewrites every generated block of doc from the File its
// renderer names, which read returns (by its path from the repository's
// root), and returns the document and the names of the blocks it holds. A
// block no renderer knows is an error.
func Regenerate(doc string, read func(path string) (*File, error)) (string, []string, error) {
	spans, err := Spans(doc)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var names []string
	last := 0
	for _, s := range spans {
		r, ok := Renderers[s.Name]
		if !ok {
			return "", nil, fmt.Errorf("no renderer for the generated block %s", s.Name)
		}
		f, err := read(r.Path)
		if err != nil {
			return "", nil, fmt.Errorf("block %s: %w", s.Name, err)
		}
		content, err := r.Render(f)
		if err != nil {
			return "", nil, fmt.Errorf("block %s: %w", s.Name, err)
		}
		b.WriteString(doc[last:s.Start])
		b.WriteString(content)
		last = s.End
		names = append(names, s.Name)
	}
	b.WriteString(doc[last:])
	return b.String(), names, nil
}

// note is the comment every block rendered from the File at path starts
// with.
func note(path string) string {
	return "<!-- Written by `make docs-figures` from " + path + ", which `make bench-scale` writes. Do not edit. -->\n"
}

// Command is the make invocation that reproduces f's settings, written to
// path (BENCH_JSON when it is not the default).
func (f *File) Command(path string) string {
	parts := []string{"make bench-scale"}
	for _, s := range []struct{ env, arg, def string }{
		{"OPENMED_SCALE_N", "N", "100,1000"}, {"OPENMED_SCALE_PODS", "PODS", "on"}, {"OPENMED_SCALE_BAKE", "BAKE", "both"},
		{"OPENMED_SCALE_VERIFY", "VERIFY", "off"}, {"OPENMED_SCALE_UNOWNED", "UNOWNED", "0"}, {"OPENMED_SCALE_SHARDS", "SHARDS", "1"},
	} {
		if v, ok := f.Settings[s.env]; ok && v != s.def && v != "" {
			parts = append(parts, s.arg+"="+v)
		}
	}
	if path != JSONPath {
		parts = append(parts, "BENCH_JSON="+path)
	}
	cmd := strings.Join(parts, " ")
	if v := f.Settings["OPENMED_SCALE_STEADY"]; v != "" {
		cmd = "OPENMED_SCALE_STEADY=" + v + " " + cmd
	}
	if v := f.Settings["OPENMED_LOCKDOWN"]; v != "" {
		cmd = "OPENMED_LOCKDOWN=" + v + " " + cmd
	}
	return cmd
}

// provenance is the sentence that says where f's figures, written to
// path, come from.
func (f *File) provenance(path string) string {
	date, _, _ := strings.Cut(f.Date, "T")
	return fmt.Sprintf("`%s`, one run on %s (%d CPUs, %s, kube-apiserver %s, etcd %s; %s in all)",
		f.Command(path), date, f.CPUs, f.Go, f.KubeAPIServer, f.Etcd, duration(f.Seconds))
}

// Table is docs/scale.md's block: every run of f, then the shards against
// one process and the larger N against the smaller.
func Table(f *File) (string, error) {
	if len(f.Runs) == 0 {
		return "", fmt.Errorf("no runs")
	}
	var b strings.Builder
	b.WriteString(note(JSONPath))
	fmt.Fprintf(&b, "Measured with %s; every figure below is in [`results.json`](scale/results.json).\n", f.provenance(JSONPath))
	b.WriteString("The API calls are the operator's requests for models, counted by the API server's audit log and asserted exactly; the rest is printed, never asserted.\n\n")
	b.WriteString("| N | pods per Deployment | bake guard | operator processes | API calls per model: first rollout / upgrade / steady state | passes per model: rollout / upgrade | operator CPU per model: rollout / upgrade | peak RSS (once the caches synced, before any model) | create → all Ready (API server and etcd CPU) | upgrade → all Ready | failover: every model reconciled; calls for models; peak RSS |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	var notes []string
	for _, r := range f.Runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s / %s | %s / %s ms | %s MiB (%s MiB) | %s (%s cores) | %s | %s; %d; %s MiB |\n",
			thousands(r.N), r.podsText(), r.bakeText(), r.processText(), r.CallsText(),
			fixed(r.PassesPerModel.Rollout, 2), fixed(r.PassesPerModel.Upgrade, 2),
			fixed(r.CPUMsPerModel.Rollout, 2), fixed(r.CPUMsPerModel.Upgrade, 2),
			fixed(r.PeakRSSMiB, 1), fixed(r.SyncedRSSMiB, 1),
			duration(r.CreateReadySeconds), fixed(r.APIServerCores, 2), duration(r.UpgradeReadySeconds),
			duration(r.Failover.Seconds), r.Failover.Calls, fixed(r.Failover.PeakRSSMiB, 1))
		if c := conflictsText(r); c != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", r.label(), c))
		}
	}
	if strings.Contains(b.String(), "(+") {
		b.WriteString("\n" + extraNote)
	}
	if len(notes) > 0 {
		b.WriteString("\nWrites the API server answered 409 Conflict (a conditional write that met a newer version, written again by the next pass; not in the calls above): ")
		b.WriteString(strings.Join(notes, "; "))
		b.WriteString(".\n")
	}
	if s := shardsText(f); s != "" {
		b.WriteString("\n" + s)
	}
	if s := growthText(f); s != "" {
		b.WriteString("\n" + s)
	}
	return b.String(), nil
}

// Headline is README.md's block: one row, the largest N of the default
// shape (pods, the bake guard, one process) or else the largest N.
func Headline(f *File) (string, error) {
	r, ok := f.headlineRun()
	if !ok {
		return "", fmt.Errorf("no runs")
	}
	var b strings.Builder
	b.WriteString(note(JSONPath))
	b.WriteString("| models | API calls per model: first rollout / upgrade / steady state | operator CPU per model: rollout / upgrade | operator peak RSS | create → all Ready |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	fmt.Fprintf(&b, "| %s, %s, %s | %s (asserted exactly) | %s / %s ms | %s MiB | %s |\n",
		thousands(r.N), r.podsPhrase(), r.guardPhrase(), r.CallsText(),
		fixed(r.CPUMsPerModel.Rollout, 2), fixed(r.CPUMsPerModel.Upgrade, 2), fixed(r.PeakRSSMiB, 1), duration(r.CreateReadySeconds))
	fmt.Fprintf(&b, "\nMeasured with %s.", f.provenance(JSONPath))
	if strings.Contains(r.CallsText(), "(+") {
		b.WriteString(" A count with (+k) had k calls more over the N models, each one the benchmark accounts for ([Scale](docs/scale.md#scale-benchmark-figures)).")
	}
	b.WriteString("\n")
	return b.String(), nil
}

func (f *File) headlineRun() (Run, bool) {
	var best Run
	found := false
	score := func(r Run) int {
		s := r.N * 16
		if r.Shards <= 1 && r.Unowned == 0 {
			s += 8
		}
		if r.Pods {
			s += 4
		}
		if r.Verification == nil {
			s += 2
		}
		if r.BakeSeconds > 0 {
			s++
		}
		return s
	}
	for _, r := range f.Runs {
		if !found || score(r) > score(best) {
			best, found = r, true
		}
	}
	return best, found
}

// CallsText is the calls per model of the first rollout, the upgrade and
// the steady-state windows, as "9 / 6 / 0".
func (r Run) CallsText() string {
	steady := 0
	for _, w := range r.Steady {
		steady += w.Calls
	}
	return fmt.Sprintf("%s / %s / %s", perModel(r.FirstRollout.Total(), r.N), perModel(r.Upgrade.Total(), r.N), perModel(steady, r.N))
}

// perModel is total/n as a whole number, and the calls above n times it
// as "+k" (see extraNote).
func perModel(total, n int) string {
	if n == 0 {
		return "-"
	}
	if extra := total % n; extra != 0 {
		return fmt.Sprintf("%d (+%d)", total/n, extra)
	}
	return strconv.Itoa(total / n)
}

// extraNote explains a "+k" of perModel.
const extraNote = "A count with (+k) had k calls more than N times it in the whole phase, each one the benchmark accounts for and asserts: with the bake guard, a model seen `Baking` before its pod store saw its pods writes its status once more, and the pass after a status write answered 409 may read the version's pods once more.\n"

func (r Run) podsText() string {
	switch {
	case r.Verification != nil:
		return "2, verified"
	case r.Pods:
		return "2"
	}
	return "none"
}

func (r Run) podsPhrase() string {
	switch {
	case r.Verification != nil:
		return "two pods per Deployment, each verified by the golden request"
	case r.Pods:
		return "two pods per Deployment"
	}
	return "no pods"
}

func (r Run) bakeText() string {
	if r.BakeSeconds > 0 {
		return fmt.Sprintf("on, %d s", r.BakeSeconds)
	}
	return "off"
}

func (r Run) guardPhrase() string {
	if r.BakeSeconds > 0 {
		return "the bake guard on"
	}
	return "no bake guard"
}

func (r Run) processText() string {
	s := "1"
	if r.Shards > 1 {
		s = fmt.Sprintf("%d (shards)", r.Shards)
	}
	if r.Unowned > 0 {
		s += fmt.Sprintf(", %s Deployments no model targets", thousands(r.Unowned))
	}
	return s
}

// label names a run in a sentence.
func (r Run) label() string {
	s := fmt.Sprintf("N = %s, %s", thousands(r.N), r.guardPhrase())
	if r.Shards > 1 {
		s += fmt.Sprintf(", %d shards", r.Shards)
	}
	if r.Unowned > 0 {
		s += fmt.Sprintf(", %s unowned Deployments", thousands(r.Unowned))
	}
	if !r.Pods {
		s += ", no pods"
	}
	if r.Verification != nil {
		s += ", the golden request"
	}
	return s
}

// sameShape reports whether a and b have the same models and Deployments:
// pods, bake guard, golden request and unowned Deployments.
func sameShape(a, b Run) bool {
	return a.Pods == b.Pods && a.BakeSeconds == b.BakeSeconds && (a.Verification == nil) == (b.Verification == nil) && a.Unowned == b.Unowned
}

func conflictsText(r Run) string {
	var parts []string
	for _, p := range []struct {
		name string
		m    map[string]int
	}{{"first rollout", r.FirstRollout.Conflicts}, {"upgrade", r.Upgrade.Conflicts}} {
		keys := make([]string, 0, len(p.m))
		for k := range p.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d × %s", p.name, p.m[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// shardsText compares each run on several processes with the same shape on
// one: each process's peak RSS, and its share of the one process's.
func shardsText(f *File) string {
	var rows []string
	for _, s := range f.Runs {
		if s.Shards <= 1 {
			continue
		}
		var one *Run
		for i, r := range f.Runs {
			if r.Shards <= 1 && r.N == s.N && sameShape(r, s) {
				one = &f.Runs[i]
			}
		}
		if one == nil || one.PeakRSSMiB == 0 {
			continue
		}
		var mib, share []string
		for _, p := range s.PerShard {
			mib = append(mib, fixed(p.PeakRSSMiB, 1))
			share = append(share, fmt.Sprintf("%.0f %%", 100*p.PeakRSSMiB/one.PeakRSSMiB))
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s MiB | %s MiB | %s | %d |", thousands(s.N), s.podsText(), s.bakeText(),
			fixed(one.PeakRSSMiB, 1), strings.Join(mib, ", "), strings.Join(share, ", "), s.CrossShardCalls))
	}
	if len(rows) == 0 {
		return ""
	}
	return markdownTable("Each shard against one process of the same shape, the same run: the share is each shard's peak RSS of the one process's.",
		[]string{"N", "pods per Deployment", "bake guard", "one process's peak RSS", "each shard's peak RSS", "each shard's share", "calls of one shard for another's models"}, rows)
}

// growthText compares, for each shape on one process, the largest N with
// the smallest: CPU per model and RSS per model.
func growthText(f *File) string {
	var lines []string
	seen := map[string]bool{}
	for _, a := range f.Runs {
		if a.Shards > 1 {
			continue
		}
		key := fmt.Sprintf("%t/%d/%t/%d", a.Pods, a.BakeSeconds, a.Verification != nil, a.Unowned)
		if seen[key] {
			continue
		}
		seen[key] = true
		lo, hi := a, a
		for _, r := range f.Runs {
			if r.Shards <= 1 && sameShape(r, a) {
				if r.N < lo.N {
					lo = r
				}
				if r.N > hi.N {
					hi = r
				}
			}
		}
		if lo.N == hi.N || lo.CPUMsPerModel.Rollout == 0 || lo.CPUMsPerModel.Upgrade == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("| %s | %s against %s | %.2f× / %.2f× | %s KiB |", strings.TrimPrefix(hi.label(), fmt.Sprintf("N = %s, ", thousands(hi.N))),
			thousands(hi.N), thousands(lo.N), hi.CPUMsPerModel.Rollout/lo.CPUMsPerModel.Rollout, hi.CPUMsPerModel.Upgrade/lo.CPUMsPerModel.Upgrade,
			fixed((hi.PeakRSSMiB-lo.PeakRSSMiB)*1024/float64(hi.N-lo.N), 1)))
	}
	if len(lines) == 0 {
		return ""
	}
	return markdownTable("The larger N against the smaller, one process, the same run:",
		[]string{"shape", "N", "operator CPU per model: rollout / upgrade", "peak RSS per model added"}, lines)
}

// markdownTable is intro, a blank line and the table of header and rows
// (each row already a markdown row).
func markdownTable(intro string, header, rows []string) string {
	var b strings.Builder
	b.WriteString(intro + "\n\n")
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString(strings.Repeat("| --- ", len(header)) + "|\n")
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	return b.String()
}

// thousands prints n with a comma every three digits, as the docs do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fixed(v float64, digits int) string { return strconv.FormatFloat(v, 'f', digits, 64) }

// duration prints seconds as "5.9 s" or "7 min 35 s".
func duration(sec float64) string {
	if sec < 60 {
		if sec < 10 {
			return fixed(sec, 2) + " s"
		}
		return fixed(sec, 1) + " s"
	}
	total := int(math.Round(sec))
	return fmt.Sprintf("%d min %d s", total/60, total%60)
}
