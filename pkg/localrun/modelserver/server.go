package modelserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Behaviour is how a pod answers POST /pii/extract.
type Behaviour int

const (
	// Correct answers 200 with the entities of the text (Entities).
	Correct Behaviour = iota
	// OmitName answers 200 with the entities of the text but the NAME
	// ones, as a model that lost a label would.
	OmitName
	// ServerError answers 500.
	ServerError
	// Hang never answers: the request ends without a response when the
	// client gives up or the server stops.
	Hang
)

// String is the behaviour's name, as in Go.
func (b Behaviour) String() string {
	switch b {
	case Correct:
		return "Correct"
	case OmitName:
		return "OmitName"
	case ServerError:
		return "ServerError"
	case Hang:
		return "Hang"
	}
	return "Behaviour(" + strconv.Itoa(int(b)) + ")"
}

// maxBody is how much of a request's body is read and recorded.
const maxBody = 1 << 20

// extractRequest is the body of POST /pii/extract.
type extractRequest struct {
	Text                string   `json:"text"`
	ModelName           string   `json:"model_name"`
	ConfidenceThreshold *float64 `json:"confidence_threshold"`
}

// extractResponse is the body of its answer.
type extractResponse struct {
	Entities []Entity `json:"entities"`
}

// podServer is the HTTP server of one pod.
type podServer struct {
	fleet *Fleet
	name  string
	addr  netip.AddrPort
	srv   *http.Server

	mu  sync.Mutex
	pod *corev1.Pod
	// stopping is set by stop; no handler starts after it.
	stopping bool
	handlers sync.WaitGroup

	// closing is closed by stop, to end the requests that hang.
	closing chan struct{}
	// served is closed when Serve has returned.
	served chan struct{}
}

// setPod keeps the latest state of the pod for Behaviour.
func (s *podServer) setPod(pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pod = pod
}

// behaviour asks the Fleet's callback how the pod answers now.
func (s *podServer) behaviour() Behaviour {
	s.mu.Lock()
	pod := s.pod.DeepCopy()
	s.mu.Unlock()
	return s.fleet.opts.Behaviour(pod)
}

// enter counts a handler in, unless the server is stopping.
func (s *podServer) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.handlers.Add(1)
	return true
}

// stop ends the requests that hang, lets the others finish, closes the
// listener and every connection, and waits for the handlers and Serve to
// return.
func (s *podServer) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	close(s.closing)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.served
	s.handlers.Wait()
}

// handler records each request, then routes it as the OpenMed service does.
func (s *podServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /livez", ok)
	mux.HandleFunc("POST /pii/extract", s.extract)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			// A server that is stopping takes no more requests.
			panic(http.ErrAbortHandler)
		}
		defer s.handlers.Done()
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
		r.Body = io.NopCloser(bytes.NewReader(body))
		req := s.fleet.record(&Request{
			Pod: s.name, Addr: s.addr, Time: time.Now(),
			Method: r.Method, Path: r.URL.Path, Host: r.Host, Header: r.Header.Clone(), Body: body,
		})
		sw := &statusWriter{ResponseWriter: w}
		// Deferred, so a request that hangs, and ends in a panic, is
		// recorded with no status.
		defer func() { s.fleet.setStatus(req, sw.status) }()
		mux.ServeHTTP(sw, r)
	})
}

// extract answers POST /pii/extract as the pod's Behaviour says.
func (s *podServer) extract(w http.ResponseWriter, r *http.Request) {
	b := s.behaviour()
	switch b {
	case ServerError:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": "Internal Server Error"})
		return
	case Hang:
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		// Ends the request with no response: net/http closes the
		// connection and logs nothing.
		panic(http.ErrAbortHandler)
	}
	var in extractRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Text == "" {
		// FastAPI's answer to a body it cannot validate.
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "a JSON body with a non-empty text is required"})
		return
	}
	entities := []Entity{}
	for _, e := range Entities(in.Text) {
		if (in.ConfidenceThreshold != nil && e.Score < *in.ConfidenceThreshold) || (b == OmitName && e.Label == LabelName) {
			continue
		}
		entities = append(entities, e)
	}
	writeJSON(w, http.StatusOK, extractResponse{Entities: entities})
}

func ok(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}
