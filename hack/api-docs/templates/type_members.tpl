{{- /* crd-ref-docs' type_members template; the description is escaped for
a table cell by "cell" (type.tpl). */ -}}
{{- define "type_members" -}}
{{- $field := . -}}
{{- if eq $field.Name "metadata" -}}
Refer to Kubernetes API documentation for fields of `metadata`.
{{- else -}}
{{ template "cell" $field.Doc }}
{{- end -}}
{{- end -}}
