{{- /*
The admission webhook's serving certificate and CA, made once per render and shared by
webhook-certs.yaml (the Secret the controller pods mount) and webhook-validating.yaml (the caBundle
the API server trusts). An existing complete Secret is reused (lookup), so an upgrade never rotates the
CA under running pods; delete the Secret and upgrade to rotate (the pods reload the files by themselves).
`helm template` (no cluster) always generates a new pair.
*/ -}}
{{- define "gpustack-worker.webhookCerts" -}}
{{- if not (hasKey .Values "__webhookCerts") -}}
{{- $svc := "gpustack-worker-webhook" -}}
{{- $ns := .Values.systemNamespace -}}
{{- $data := dict -}}
{{- $secret := lookup "v1" "Secret" $ns "gpustack-worker-webhook-certs" -}}
{{- if $secret -}}
{{- $data = $secret.data | default dict -}}
{{- end -}}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- $_ := set .Values "__webhookCerts" (dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key")) -}}
{{- else -}}
{{- $days := int .Values.webhook.certValidityDays -}}
{{- $ca := genCA "gpustack-worker-webhook-ca" $days -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) nil $names $days $ca -}}
{{- $_ := set .Values "__webhookCerts" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "gpustack-worker.webhookCABundle" -}}
{{- include "gpustack-worker.webhookCerts" . -}}
{{- index .Values "__webhookCerts" "ca" -}}
{{- end -}}
