package validation

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// kind is the JSON type a schema position expects.
type kind int

const (
	kString kind = iota
	kInteger
	kBool
	kIntOrString
	kObject
	kList
)

// node describes one position of the OpenMedModel schema: its JSON type and,
// for objects, its fields and which of them are required.
type node struct {
	kind     kind
	fields   map[string]*node
	required []string
	// items is the node of a list's items.
	items *node
	// emptyOK marks a string without a minimum length or pattern: an
	// explicit "" is a value.
	emptyOK bool
	// msg is the message of an int-or-string that is neither.
	msg string
}

var (
	str = &node{kind: kString}
	num = &node{kind: kInteger}
	bln = &node{kind: kBool}
	ios = &node{kind: kIntOrString, msg: MsgIntOrPercent}
	// strOrEmpty is a string field whose schema accepts "".
	strOrEmpty = &node{kind: kString, emptyOK: true}

	verificationSchema = &node{kind: kObject, required: []string{"request", "successCondition"}, fields: map[string]*node{
		"successCondition": str,
		"attempts":         num,
		"intervalSeconds":  num,
		"request": {kind: kObject, required: []string{"port"}, fields: map[string]*node{
			"port":           {kind: kIntOrString, msg: MsgVerificationPort},
			"path":           str,
			"method":         str,
			"body":           strOrEmpty,
			"timeoutSeconds": num,
			"headers": {kind: kList, items: &node{kind: kObject, required: []string{"name"}, fields: map[string]*node{
				"name":  str,
				"value": strOrEmpty,
				"valueFrom": {kind: kObject, required: []string{"secretKeyRef"}, fields: map[string]*node{
					"secretKeyRef": {kind: kObject, required: []string{"key", "name"}, fields: map[string]*node{
						"name": str,
						"key":  str,
					}},
				}},
			}}},
		}},
	}}

	specSchema = &node{kind: kObject, required: []string{"family", "version", "tier", "rolloutStrategy"}, fields: map[string]*node{
		"family":                str,
		"version":               str,
		"tier":                  str,
		"replicas":              num,
		"manifestConfigMapName": str,
		"serviceAccountName":    str,
		"suspend":               bln,
		"revisionHistoryLimit":  num,
		"verification":          verificationSchema,
		"targetRef": {kind: kObject, fields: map[string]*node{
			"name":          str,
			"containerName": str,
		}},
		"rolloutStrategy": {kind: kObject, required: []string{"type"}, fields: map[string]*node{
			"type":                    str,
			"maxUnavailable":          ios,
			"maxSurge":                ios,
			"rollbackOnFailure":       bln,
			"progressDeadlineSeconds": num,
			"bakeSeconds":             num,
			"whenUnschedulable":       str,
			"unschedulableSeconds":    num,
			"minAvailable":            num,
		}},
	}}
)

// ValidateJSON validates a whole OpenMedModel as JSON, the way the API server
// does on create with strict field validation: unknown fields and wrong JSON
// types are errors, null values are dropped, defaults are filled in and then
// every value rule runs. On success it returns the decoded, defaulted object.
// Status is not validated: the API server drops it on create.
func ValidateJSON(data []byte) (*v1alpha1.OpenMedModel, field.ErrorList) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath(""), field.OmitValueType{}, "must be a JSON object")}
	}
	root, ok := raw.(map[string]any)
	if !ok {
		return nil, field.ErrorList{field.Invalid(field.NewPath(""), field.OmitValueType{}, "must be a JSON object")}
	}
	var errs field.ErrorList
	for key := range root {
		switch key {
		case "apiVersion", "kind", "metadata", "spec", "status":
		default:
			errs = append(errs, unknownField(field.NewPath("")))
		}
	}
	specPath := field.NewPath("spec")
	spec, present := root["spec"]
	if !present || spec == nil {
		errs = append(errs, field.Required(specPath, ""))
	} else {
		errs = append(errs, walk(spec, specSchema, specPath)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}

	// The structure is sound, so the typed decode cannot fail on the spec;
	// metadata is checked here (strictly, like the server).
	delete(root, "status")
	clean, err := json.Marshal(canonicalize(root))
	if err != nil {
		return nil, field.ErrorList{field.InternalError(field.NewPath(""), err)}
	}
	obj := &v1alpha1.OpenMedModel{}
	strict := json.NewDecoder(bytes.NewReader(clean))
	strict.DisallowUnknownFields()
	if err := strict.Decode(obj); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), field.OmitValueType{}, "must be valid object metadata")}
	}
	obj.Default()
	if errs := ValidateOpenMedModel(obj); len(errs) > 0 {
		return nil, errs
	}
	return obj, nil
}

// walk checks the JSON types, unknown fields, required fields, explicit empty
// strings and integer ranges of v against n. Value rules that a typed object
// can express are left to ValidateSpec.
func walk(v any, n *node, p *field.Path) field.ErrorList {
	switch n.kind {
	case kObject:
		obj, ok := v.(map[string]any)
		if !ok {
			return field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, "must be an object")}
		}
		var errs field.ErrorList
		for key, child := range obj {
			sub, known := n.fields[key]
			if !known {
				errs = append(errs, unknownField(p))
				continue
			}
			if child == nil { // null is pruned, like a missing field
				continue
			}
			errs = append(errs, walk(child, sub, p.Child(key))...)
		}
		for _, key := range n.required {
			if child, ok := obj[key]; !ok || child == nil {
				errs = append(errs, field.Required(p.Child(key), ""))
			}
		}
		return errs
	case kList:
		list, ok := v.([]any)
		if !ok {
			return field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, "must be a list")}
		}
		var errs field.ErrorList
		for i, item := range list {
			errs = append(errs, walk(item, n.items, p.Index(i))...)
		}
		return errs
	case kString:
		s, ok := v.(string)
		if !ok {
			return field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, "must be a string")}
		}
		if s == "" && !n.emptyOK {
			return field.ErrorList{field.Invalid(p, field.OmitValueType{}, "must not be empty")}
		}
	case kBool:
		if _, ok := v.(bool); !ok {
			return field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, "must be a boolean")}
		}
	case kInteger:
		if _, ok := int32Value(v); !ok {
			return field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, "must be an integer in the allowed range")}
		}
	case kIntOrString:
		switch x := v.(type) {
		case string:
		case json.Number:
			if _, ok := int32Value(x); !ok {
				return field.ErrorList{field.Invalid(p, field.OmitValueType{}, n.msg)}
			}
		default:
			return field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, n.msg)}
		}
	}
	return nil
}

// int32Value reports whether v is a whole JSON number that fits an int32 (every
// integer of the schema is an int32 with bounds inside that range).
func int32Value(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, ok := parseInt(string(n))
	if !ok || i < math.MinInt32 || i > math.MaxInt32 {
		return 0, false
	}
	return i, true
}

func unknownField(p *field.Path) *field.Error {
	return field.Invalid(p, field.OmitValueType{}, "must not contain unknown fields")
}

// canonicalize drops null object members, as the API server does for fields
// that are not nullable (none of the OpenMedModel's are), and spells whole
// numbers such as 2.0 as integers, as the server stores them.
func canonicalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if child == nil {
				delete(x, k)
				continue
			}
			x[k] = canonicalize(child)
		}
	case []any:
		for i := range x {
			x[i] = canonicalize(x[i])
		}
	case json.Number:
		if i, ok := parseInt(string(x)); ok {
			return json.Number(strconv.FormatInt(i, 10))
		}
	}
	return v
}
