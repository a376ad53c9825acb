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

// renderStages returns the kwok stages YAML with the pod-readiness stages
// split by sel.
func renderStages(sel NeverReady) ([]byte, error) {
	// JSON strings are YAML strings, so json.Marshal quotes the jq key and
	// the values safely whatever characters a value holds.
	key, err := json.Marshal(fmt.Sprintf(".metadata.annotations[%q]", sel.Annotation))
	if err != nil {
		return nil, err
	}
	data := struct {
		Key              string
		Include, Exclude string
		Values           string
	}{Key: string(key), Include: "Exists", Exclude: "DoesNotExist"}
	// kwok's Exists and DoesNotExist, like In and NotIn, are exact
	// complements (a missing annotation is "not in" every list), so every
	// Pending pod matches exactly one of the two readiness stages.
	if len(sel.Values) > 0 {
		values, err := json.Marshal(sel.Values)
		if err != nil {
			return nil, err
		}
		data.Include, data.Exclude, data.Values = "In", "NotIn", string(values)
	}
	var buf bytes.Buffer
	if err := stagesTemplate.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render kwok stages: %w", err)
	}
	return buf.Bytes(), nil
}
