package minicluster

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"text/template"
)

// stagesYAML holds the kwok stages; see the comments in the file.
//
//go:embed stages.yaml
var stagesYAML string

var stagesTemplate = template.Must(template.New("stages").Delims("[[", "]]").Parse(stagesYAML))

// selection is how a pod stage selects by an annotation: the jq key, the
// operators that include and exclude, and the values (JSON, or empty).
type selection struct {
	Key              string
	Include, Exclude string
	Values           string
}

func selectionOf(annotation string, values []string) (selection, error) {
	// JSON strings are YAML strings, so json.Marshal quotes the jq key and
	// the values safely whatever characters a value holds.
	key, err := json.Marshal(fmt.Sprintf(".metadata.annotations[%q]", annotation))
	if err != nil {
		return selection{}, err
	}
	s := selection{Key: string(key), Include: "Exists", Exclude: "DoesNotExist"}
	// kwok's Exists and DoesNotExist, like In and NotIn, are exact
	// complements (a missing annotation is "not in" every list), so every
	// Pending pod matches exactly one of the two readiness stages.
	if len(values) > 0 {
		v, err := json.Marshal(values)
		if err != nil {
			return selection{}, err
		}
		s.Include, s.Exclude, s.Values = "In", "NotIn", string(v)
	}
	return s, nil
}

// renderStages returns the kwok stages YAML with the pod-readiness stages
// split by never and the restart stage selecting by crash.
func renderStages(never NeverReady, crash CrashAfterReady) ([]byte, error) {
	nr, err := selectionOf(never.Annotation, never.Values)
	if err != nil {
		return nil, err
	}
	cr, err := selectionOf(crash.Annotation, crash.Values)
	if err != nil {
		return nil, err
	}
	exitCode := 1
	if crash.Reason == "OOMKilled" {
		exitCode = 137
	}
	data := struct {
		NeverReady, Crash                  selection
		CrashAfterMillis                   int64
		CrashReason                        string
		CrashExitCode                      int
		RestartAnnotation, EvictAnnotation string
	}{nr, cr, crash.After.Milliseconds(), crash.Reason, exitCode, RestartContainerAnnotation, EvictAnnotation}
	var buf bytes.Buffer
	if err := stagesTemplate.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render kwok stages: %w", err)
	}
	return buf.Bytes(), nil
}
