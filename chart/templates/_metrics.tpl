{{/*
Secure metrics serving (metrics.secure, docs/runtime.md "Metrics serving"): the container's extra
arguments, port, mount and volume, included by the Deployment and the DaemonSet. Nothing when off.
*/}}
{{- define "gpustack-worker.metricsSecureArgs" -}}
{{- if .Values.metrics.secure.enabled }}
- --metrics-secure-bind=0.0.0.0:{{ .Values.metrics.secure.port }}
{{- if .Values.metrics.secure.certSecret }}
- --metrics-cert-dir=/etc/gpustack-worker/metrics-certs
{{- end }}
{{- end }}
{{- end -}}

{{- define "gpustack-worker.metricsSecurePort" -}}
{{- if .Values.metrics.secure.enabled }}
- {name: https-metrics, containerPort: {{ .Values.metrics.secure.port }}}
{{- end }}
{{- end -}}

{{/* Without certSecret the process writes its self-signed pair under $TMPDIR: a memory-backed emptyDir
(the root filesystem is read-only). */}}
{{- define "gpustack-worker.metricsSecureMount" -}}
{{- if .Values.metrics.secure.enabled }}
{{- if .Values.metrics.secure.certSecret }}
- {name: metrics-certs, mountPath: /etc/gpustack-worker/metrics-certs, readOnly: true}
{{- else }}
- {name: metrics-self-signed, mountPath: /tmp}
{{- end }}
{{- end }}
{{- end -}}

{{- define "gpustack-worker.metricsSecureVolume" -}}
{{- if .Values.metrics.secure.enabled }}
{{- if .Values.metrics.secure.certSecret }}
- name: metrics-certs
  secret:
    secretName: {{ .Values.metrics.secure.certSecret }}
{{- else }}
- name: metrics-self-signed
  emptyDir: {medium: Memory, sizeLimit: 1Mi}
{{- end }}
{{- end }}
{{- end -}}
