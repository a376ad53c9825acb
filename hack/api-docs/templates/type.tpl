{{- /*
The type template of crd-ref-docs' markdown renderer (templates/markdown in
github.com/elastic/crd-ref-docs, Apache-2.0), changed so that the page
reads right on GitHub: validation is rendered from the kubebuilder markers
themselves (patterns unescaped in code spans, bounds as integers, enums as
values, defaults as JSON, CEL rules with their messages), and text that
holds "<" or ">" is escaped instead of being read as HTML.
*/ -}}
{{- define "type" -}}
{{- $type := . -}}
{{- if markdownShouldRenderType $type -}}

#### {{ $type.Name }}

{{ if $type.IsAlias }}_Underlying type:_ _{{ markdownRenderTypeLink $type.UnderlyingType  }}_{{ end }}

{{ template "text" $type.Doc }}

{{ if $type.Markers -}}
{{- $rules := index $type.Markers "kubebuilder:validation:XValidation" -}}
{{- $enum := index $type.Markers "kubebuilder:validation:Enum" -}}
{{- if or $rules $enum -}}
_Validation:_
{{- if $enum }}
- One of {{ template "enum" (last $enum) }}
{{- end }}
{{- range $rules }}
- CEL `{{ .Rule }}`{{ with .Message }}: "{{ template "text" . }}"{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{ if $type.References -}}
_Appears in:_
{{- range $type.SortedReferences }}
- {{ markdownRenderTypeLink . }}
{{- end }}
{{- end }}

{{ if $type.Members -}}
| Field | Description | Default | Validation |
| --- | --- | --- | --- |
{{ if $type.GVK -}}
| `apiVersion` _string_ | `{{ $type.GVK.Group }}/{{ $type.GVK.Version }}` | | |
| `kind` _string_ | `{{ $type.GVK.Kind }}` | | |
{{ end -}}

{{ range $type.Members -}}
| `{{ .Name  }}` _{{ markdownRenderType .Type }}_ | {{ template "type_members" . }} | {{ template "default" .Markers }} | {{ template "validation" . }} |
{{ end -}}

{{ end -}}

{{ if $type.EnumValues -}}
| Value | Description |
| --- | --- |
{{ range $type.EnumValues -}}
| `{{ .Name }}` | {{ template "cell" .Doc }} |
{{ end -}}
{{ end -}}


{{- end -}}
{{- end -}}

{{- /* text: prose outside a table, "<" and ">" escaped. */ -}}
{{- define "text" -}}
{{- . | replace "&" "&amp;" | replace "<" "&lt;" | replace ">" "&gt;" -}}
{{- end -}}

{{- /* cell: prose inside a table cell: escaped as text, "|" escaped, one
line (<br /> for a line break, one for an empty line). */ -}}
{{- define "cell" -}}
{{- . | trim | replace "&" "&amp;" | replace "<" "&lt;" | replace ">" "&gt;" | replace "|" "\\|" | replace "\n" "<br />" | replace "<br /><br />" "<br />" -}}
{{- end -}}

{{- /* code: a code span inside a table cell: only "|" is escaped (GitHub
renders \| in a table's code span as |). */ -}}
{{- define "code" -}}
`{{ . | replace "|" "\\|" }}`
{{- end -}}

{{- /* enum: the values of an Enum marker as code spans. */ -}}
{{- define "enum" -}}
{{- range $i, $v := . }}{{ if $i }}, {{ end }}`{{ $v }}`{{ end -}}
{{- end -}}

{{- /* number: a Minimum or Maximum marker (a float64) as written, without
an exponent: 2147483647, not 2.147483647e+09. */ -}}
{{- define "number" -}}
{{- regexReplaceAll "\\.?0+$" (printf "%f" .) "" -}}
{{- end -}}

{{- /* default: the kubebuilder:default marker's value as JSON. */ -}}
{{- define "default" -}}
{{- with index . "kubebuilder:default" }}{{ template "code" (toJson (last .).Value) }}{{ end -}}
{{- end -}}

{{- /* validation: a field's markers, each ending in <br />. A CEL rule of
the field's type is shown with the type, not again on every field of it. */ -}}
{{- define "validation" -}}
{{- $m := .Markers -}}
{{- with index $m "required" }}Required <br />{{ end -}}
{{- with index $m "optional" }}Optional <br />{{ end -}}
{{- with index $m "kubebuilder:validation:Enum" }}One of {{ template "enum" (last .) }} <br />{{ end -}}
{{- with index $m "kubebuilder:validation:Minimum" }}Minimum: {{ template "number" (last .) }} <br />{{ end -}}
{{- with index $m "kubebuilder:validation:Maximum" }}Maximum: {{ template "number" (last .) }} <br />{{ end -}}
{{- with index $m "kubebuilder:validation:MinLength" }}MinLength: {{ last . }} <br />{{ end -}}
{{- with index $m "kubebuilder:validation:MaxLength" }}MaxLength: {{ last . }} <br />{{ end -}}
{{- with index $m "kubebuilder:validation:Pattern" }}Pattern: {{ template "code" (printf "%s" (last .)) }} <br />{{ end -}}
{{- with index $m "kubebuilder:validation:MaxItems" }}MaxItems: {{ last . }} <br />{{ end -}}
{{- with index $m "listType" }}List type: {{ last . }}{{ with index $m "listMapKey" }}, keyed by {{ template "enum" . }}{{ end }} <br />{{ end -}}
{{- if not (index .Type.Markers "kubebuilder:validation:XValidation") -}}
{{- range index $m "kubebuilder:validation:XValidation" }}CEL {{ template "code" .Rule }}{{ with .Message }}: "{{ template "cell" . }}"{{ end }} <br />{{ end -}}
{{- end -}}
{{- end -}}
