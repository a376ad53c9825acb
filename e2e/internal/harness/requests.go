package harness

import (
	"bufio"
	"encoding/json"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Request is one request of the operator in the audit log.
type Request struct {
	// User is the operator process's user (User, or a ShardUser).
	User                                         string
	Verb, Resource, Subresource, Namespace, Name string
	// URI is the request's path and query.
	URI  string
	Code int
	At   time.Time
	// ImpersonatedUser is the user the request was made as, when the
	// operator impersonated one (a model's ServiceAccount).
	ImpersonatedUser string
	// Response is the object the API server answered with, at audit level
	// RequestResponse.
	Response json.RawMessage
}

// Kind is "verb resource[/subresource]".
func (r Request) Kind() string {
	k := r.Verb + " " + r.Resource
	if r.Subresource != "" {
		k += "/" + r.Subresource
	}
	return k
}

// modelRead reports a list one model's pass makes: the pods of a version,
// by their pod template hash.
func (r Request) modelRead() bool {
	u, err := url.Parse(r.URI)
	return err == nil && r.Resource == "pods" && strings.Contains(u.Query().Get("labelSelector"), appsv1.DefaultDeploymentUniqueLabelKey)
}

// Mutating reports a write.
func (r Request) Mutating() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Requests reads the operator's requests received in [from, to): each
// request once, a watch when it started (its ResponseComplete comes only
// when it ends, minutes later), every other request when it completed.
// The TokenReviews and SubjectAccessReviews with which the metrics
// endpoint checks a scrape are left out: the benchmark's scrapes cause
// them, not the models.
func (c *Cluster) Requests(t *testing.T, from, to time.Time) []Request {
	t.Helper()
	f, err := os.Open(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Request
	started := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e struct {
			AuditID string `json:"auditID"`
			Stage   string `json:"stage"`
			Verb    string `json:"verb"`
			User    struct {
				Username string `json:"username"`
			} `json:"user"`
			ImpersonatedUser *struct {
				Username string `json:"username"`
			} `json:"impersonatedUser"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestURI      string           `json:"requestURI"`
			ResponseObject  json.RawMessage  `json:"responseObject"`
			RequestReceived metav1.MicroTime `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line: %v", err)
		}
		if !slices.Contains(c.users, e.User.Username) || e.ObjectRef == nil || scrapeReview[e.ObjectRef.Resource] {
			continue
		}
		// A watch counts at ResponseStarted, which the API server logs for
		// every long-running response, refused ones included; a watch
		// without it (it failed before the response began) counts at
		// ResponseComplete. Every other request counts at ResponseComplete.
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			started[e.AuditID] = true
		case e.Stage != "ResponseComplete" || started[e.AuditID]:
			continue
		}
		at := e.RequestReceived.Time
		if at.Before(from) || !at.Before(to) {
			continue
		}
		r := Request{User: e.User.Username, Verb: e.Verb, Resource: e.ObjectRef.Resource, Subresource: e.ObjectRef.Subresource,
			Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name, URI: e.RequestURI, At: at, Response: e.ResponseObject}
		if e.ResponseStatus != nil {
			r.Code = e.ResponseStatus.Code
		}
		if e.ImpersonatedUser != nil {
			r.ImpersonatedUser = e.ImpersonatedUser.Username
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scrapeReview are the resources of the reviews the metrics endpoint asks
// the API server for.
var scrapeReview = map[string]bool{"tokenreviews": true, "subjectaccessreviews": true}

// PerModel splits requests into the ones a model's passes make and the ones
// the informers and the leader election make (list, watch, leases), each
// counted by kind. A list of one version's pods (by their pod template
// hash: the read of the pass that ends a bake) is a model's.
func PerModel(reqs []Request) (models, informer map[string]int) {
	models, informer = map[string]int{}, map[string]int{}
	for _, r := range reqs {
		if (r.Verb == "list" && !r.modelRead()) || r.Verb == "watch" || r.Resource == "leases" {
			informer[r.Kind()]++
			continue
		}
		models[r.Kind()]++
	}
	return models, informer
}
