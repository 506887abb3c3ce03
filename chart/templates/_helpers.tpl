{{- define "gpustack-worker.labels" -}}
app.kubernetes.io/name: gpustack-worker
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpustack-operator-worker
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "gpustack-worker.selector" -}}
app.kubernetes.io/name: gpustack-worker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- /* repository@digest when a digest is set (what a production install pins), else repository:tag. */ -}}
{{- define "gpustack-worker.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
{{- define "gpustack-worker.otelEnv" -}}
{{- if .Values.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.otel.endpoint | quote }}
{{- end }}
{{- end -}}
