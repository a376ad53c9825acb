package controllers

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/types"
)

// zapJSON is a zap logger as the operator's (JSON, caller, Info level),
// writing to buf without times.
func zapJSON(buf *bytes.Buffer) logr.Logger {
	cfg := zap.NewProductionEncoderConfig()
	cfg.TimeKey = ""
	core := zapcore.NewCore(zapcore.NewJSONEncoder(cfg), zapcore.AddSync(buf), zapcore.InfoLevel)
	return zapr.NewLogger(zap.New(core, zap.AddCaller()))
}

// TestLazyValuesLogsWhatEagerLogs: each script logs the same lines, byte
// for byte (caller included), through LazyValues as through zapr alone.
func TestLazyValuesLogsWhatEagerLogs(t *testing.T) {
	model := types.NamespacedName{Namespace: "team-a", Name: "pathology"}
	for _, tc := range []struct {
		name   string
		script func(logr.Logger)
	}{
		{"a pass's values, one line", func(l logr.Logger) {
			l = l.WithValues("controller", "openmedmodel", "controllerKind", "OpenMedModel")
			l = l.WithValues("OpenMedModel", model, "namespace", model.Namespace, "name", model.Name)
			l.WithValues("reconcileID", "5f0c").Info("reconciled", "phase", "Ready")
		}},
		{"nothing logged below the level", func(l logr.Logger) {
			l = l.WithValues("a", 1)
			l.V(1).Info("hidden", "b", 2)
			l.V(1).WithValues("c", 3).Info("hidden too")
			l.Info("shown")
		}},
		{"names, errors and values after a name", func(l logr.Logger) {
			l = l.WithValues("a", 1).WithName("events").WithValues("b", 2)
			l.Error(errors.New("connection refused"), "event dropped", "reason", "Progressing")
			l.WithName("forwarder").Info("posted")
		}},
		{"a repeated key and an odd value", func(l logr.Logger) {
			l = l.WithValues("k", 1).WithValues("k", 2).WithValues("odd")
			l.Info("line", "k", 3)
		}},
		{"two lines from one logger, values once", func(l logr.Logger) {
			l = l.WithValues("a", 1)
			l.Info("one")
			l.WithValues("b", 2).Info("two")
			l.Info("three")
		}},
		{"call depth", func(l logr.Logger) {
			helper := func(l logr.Logger) { l.WithCallDepth(1).WithValues("in", "helper").Info("from a helper") }
			helper(l.WithValues("a", 1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eager, lazy bytes.Buffer
			tc.script(zapJSON(&eager))
			tc.script(LazyValues(zapJSON(&lazy)))
			if eager.Len() == 0 {
				t.Fatal("the script logged nothing")
			}
			if lazy.String() != eager.String() {
				t.Fatalf("lazy logged\n%s\neager logged\n%s", lazy.String(), eager.String())
			}
			if !strings.Contains(eager.String(), "lazylog_internal_test.go") {
				t.Fatalf("caller is not the test's line:\n%s", eager.String())
			}
		})
	}
}

// countingSink counts the WithValues calls that reach it.
type countingSink struct {
	logr.LogSink
	withValues *int
}

func (c countingSink) WithValues(kv ...any) logr.LogSink {
	*c.withValues++
	return countingSink{c.LogSink.WithValues(kv...), c.withValues}
}

// TestLazyValuesDefersTheSink: values added to a logger that logs nothing
// never reach the sink; the first line applies them once, in order, one
// WithValues call each.
func TestLazyValuesDefersTheSink(t *testing.T) {
	var buf bytes.Buffer
	calls := 0
	l := LazyValues(logr.New(countingSink{zapJSON(&buf).GetSink(), &calls}))
	if LazyValues(l).GetSink() != l.GetSink() {
		t.Fatal("LazyValues wrapped a lazy logger again")
	}
	for i := range 100 {
		l = l.WithValues("i", i)
	}
	l.V(1).Info("below the level")
	if calls != 0 {
		t.Fatalf("%d WithValues reached the sink before a line was logged", calls)
	}
	l.Info("line")
	l.Info("again")
	if calls != 100 {
		t.Fatalf("%d WithValues reached the sink, want 100 (one per call, once)", calls)
	}
	if got := strings.Count(buf.String(), `"i":99`); got != 2 {
		t.Fatalf("the last value appears %d times, want 2:\n%s", got, buf.String())
	}
}
