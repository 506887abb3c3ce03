{{- /* The chart's name: nameOverride, else "gpustack-worker" (the app.kubernetes.io/name label). */ -}}
{{- define "gpustack-worker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- /*
The prefix of every object's name: fullnameOverride, else the release name when it contains the chart's
name, else "<release>-<name>" (Helm's convention, as Kueue's and NFD's charts). 52 characters at most, so
"<fullname>-webhook" and "<fullname>-metrics" stay DNS labels (63).
*/ -}}
{{- define "gpustack-worker.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpustack-worker.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /*
The namespace of every namespaced object: systemNamespace when set, else the release's (helm -n), so
`helm install -n NS` puts the whole release in NS as every chart does. It is also where the worker keeps
its NodeFeatures, Lease, Events, settings and TopologySource ConfigMaps/Secrets (--namespace).
*/ -}}
{{- define "gpustack-worker.namespace" -}}
{{- default .Release.Namespace .Values.systemNamespace -}}
{{- end -}}
{{- define "gpustack-worker.labels" -}}
app.kubernetes.io/name: {{ include "gpustack-worker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpustack-operator-worker
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- define "gpustack-worker.selector" -}}
app.kubernetes.io/name: {{ include "gpustack-worker.name" . }}
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
{{- /* OTLP export when an endpoint is set; the caller passes (dict "root" . "component" "agent"). */ -}}
{{- define "gpustack-worker.otelEnv" -}}
- name: OTEL_SERVICE_NAME
  value: {{ printf "%s-%s" (include "gpustack-worker.fullname" .root) .component | quote }}
{{- if .root.Values.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .root.Values.otel.endpoint | quote }}
{{- end }}
{{- end -}}
{{- /* The Secret the controller mounts: existingSecret, else <fullname>-webhook-certs (generated or cert-manager's). */ -}}
{{- define "gpustack-worker.webhookSecretName" -}}
{{- .Values.webhook.existingSecret | default (printf "%s-webhook-certs" (include "gpustack-worker.fullname" .)) -}}
{{- end -}}
{{- define "gpustack-worker.webhookServiceName" -}}
{{- printf "%s-webhook" (include "gpustack-worker.fullname" .) -}}
{{- end -}}
{{- define "gpustack-worker.metricsServiceName" -}}
{{- printf "%s-metrics" (include "gpustack-worker.fullname" .) -}}
{{- end -}}
