package controllers

import (
	"sync"

	"github.com/go-logr/logr"
)

// LazyValues returns log with its WithValues deferred to the first line
// logged. controller-runtime adds the controller, the object and a
// reconcile ID to a logger on every pass, and zap encodes them when they
// are added (a copy of its encoder each time), though a pass that succeeds
// logs nothing; Flux's event recorder does the same per event. With
// LazyValues a logger that logs nothing costs one small allocation per
// WithValues. What is logged is what the eager logger logs: the values are
// applied to the underlying sink in the order they were added, one
// WithValues call each, the first time a line is logged (so a value that
// is a pointer shows what it points to then, as with zap's WithLazy); an
// odd number of arguments is applied at once, so zapr's report of it names
// the caller's line.
// The operator's root logger is wrapped with it; an embedding manager may
// wrap its own.
func LazyValues(log logr.Logger) logr.Logger {
	sink := log.GetSink()
	if sink == nil {
		return log
	}
	if _, ok := sink.(*lazySink); ok {
		return log
	}
	// The lazy sink is one more frame between the caller and the sink.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return log.WithSink(&lazySink{base: sink})
}

// lazySink holds the values added since base, applied once when a line is
// logged.
type lazySink struct {
	base logr.LogSink
	// values are the arguments of each WithValues call since base, in order;
	// shared by the sinks derived from this one (append copies).
	values [][]any

	once     sync.Once
	resolved logr.LogSink
}

var _ logr.CallDepthLogSink = (*lazySink)(nil)

func (s *lazySink) sink() logr.LogSink {
	if len(s.values) == 0 {
		return s.base
	}
	s.once.Do(func() {
		sink := s.base
		for _, kv := range s.values {
			sink = sink.WithValues(kv...)
		}
		s.resolved = sink
	})
	return s.resolved
}

// Init is a no-op: the wrapped sink was initialized by its own logger.
func (s *lazySink) Init(logr.RuntimeInfo) {}

func (s *lazySink) Enabled(level int) bool { return s.base.Enabled(level) }

func (s *lazySink) Info(level int, msg string, keysAndValues ...any) {
	s.sink().Info(level, msg, keysAndValues...)
}

func (s *lazySink) Error(err error, msg string, keysAndValues ...any) {
	s.sink().Error(err, msg, keysAndValues...)
}

func (s *lazySink) WithValues(keysAndValues ...any) logr.LogSink {
	if len(keysAndValues) == 0 {
		return s
	}
	if len(keysAndValues)%2 != 0 {
		// zapr reports an odd value where it is added: added at once, the
		// report names the caller's line.
		return &lazySink{base: s.sink().WithValues(keysAndValues...)}
	}
	return &lazySink{base: s.base, values: append(s.values[:len(s.values):len(s.values)], keysAndValues)}
}

// WithName applies the values first, as the eager chain would have.
func (s *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{base: s.sink().WithName(name)}
}

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.base.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &lazySink{base: cd.WithCallDepth(depth), values: s.values}
}
