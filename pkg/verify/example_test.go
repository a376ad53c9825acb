package verify_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/openmed/openmed-operator/pkg/verify"
)

// ExampleSend asks a stand-in for an OpenMed pod the golden request of the
// API reference and prints the verdict: the pod found no name, so the
// message names the conjunct that is false and the start of the answer.
func ExampleSend() {
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"entities":[]}`)
	}))
	defer pod.Close()

	prog, err := verify.Compile(`response.code == 200 &&
	    response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith")`)
	if err != nil {
		fmt.Println(err)
		return
	}
	res := verify.Send(context.Background(), pod.Client(), verify.Request{
		URL:    pod.URL + "/pii/extract",
		Method: http.MethodPost,
		Header: http.Header{"Authorization": {"Bearer not-in-any-message"}},
		Body:   `{"text":"Patient John Smith was seen today.","model_name":"pii-small","confidence_threshold":0.5}`,
	}, prog)
	fmt.Println(res.Passed, res.Reason, res.Code)
	fmt.Println(res.Message)
	// Output:
	// false ConditionFalse 200
	// answered 200 but response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith") is false; body starts {"entities":[]}
}

// ExampleCheck is how a validator refuses a condition: the error names
// CEL's complaint and where it is.
func ExampleCheck() {
	fmt.Println(verify.Check(`response.code == 200 && response.json.entities.size() > "0"`))
	fmt.Println(verify.Check(`response.headers["content-type"]`))
	// Output:
	// does not compile: 1:55: found no matching overload for '_>_' applied to '(int, string)'
	// must evaluate to a bool, not string
}
