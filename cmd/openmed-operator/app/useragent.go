package app

import (
	"net/http"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/version"
)

// UserAgent is the User-Agent of every request the operator sends to the
// API server: "openmed-operator/<version> (<os>/<arch>) <commit>"
// (version.Info.UserAgent). The API server names the field manager of a
// write that sets none (a finalizer patch, a ConfigMap create, an Event)
// after what precedes the first "/": "openmed-operator", as before the
// User-Agent carried the version.
func UserAgent() string {
	return version.Get().UserAgent(controllers.ControllerName)
}

// withUserAgent sets cfg's User-Agent to agent and keeps it on the requests
// of every client made from a copy of cfg, also one whose config replaced
// it: controller-runtime's leader election calls rest.AddUserAgent, which
// puts client-go's default User-Agent ("<binary>/v0.0.0-master+$Format:%H$
// (linux/amd64) kubernetes/$Format/leader-election", client-go's version
// being unset) in its place. Such a request is sent as agent followed by
// the component's suffix ("/leader-election"), as rest.AddUserAgent would
// have made it had agent been the default.
func withUserAgent(cfg *rest.Config, agent string) {
	cfg.UserAgent = agent
	replaced := rest.DefaultKubernetesUserAgent()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return userAgentKeeper{agent: agent, replaced: replaced, next: rt}
	})
}

// userAgentKeeper is the round tripper of withUserAgent. client-go sets a
// config's User-Agent outside the config's own wrappers, so this one sees
// the header as the client set it.
type userAgentKeeper struct {
	agent    string
	replaced string
	next     http.RoundTripper
}

func (t userAgentKeeper) RoundTrip(req *http.Request) (*http.Response, error) {
	got := req.Header.Get("User-Agent")
	if strings.HasPrefix(got, t.agent) {
		return t.next.RoundTrip(req)
	}
	want := t.agent
	if suffix, ok := strings.CutPrefix(got, t.replaced); ok {
		want += suffix
	}
	req = utilnet.CloneRequest(req)
	req.Header.Set("User-Agent", want)
	return t.next.RoundTrip(req)
}

func (t userAgentKeeper) WrappedRoundTripper() http.RoundTripper { return t.next }
