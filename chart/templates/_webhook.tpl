{{- /*
The admission webhook's serving certificate and CA, in one of three modes (values.yaml, "webhook"):

- generated (neither certManager.enabled nor existingSecret): made once per render and shared by
  webhook-certs.yaml (the Secret the controller pods mount) and the webhook configurations (the caBundle
  the API server trusts). An existing complete Secret is reused (lookup), so an upgrade never rotates the
  CA under running pods; delete the Secret and upgrade to rotate (the pods reload the files by themselves).
  `helm template` (no cluster) always generates a new pair.
- cert-manager: no caBundle is rendered; the configurations carry cert-manager.io/inject-ca-from and
  cert-manager's CA injector writes it.
- existingSecret: webhook.caBundle, else the Secret's ca.crt (lookup); neither is an error.
*/ -}}
{{- define "gpustack-worker.webhookMode" -}}
{{- if and .Values.webhook.certManager.enabled .Values.webhook.existingSecret -}}
{{- fail "webhook.certManager.enabled and webhook.existingSecret are exclusive: the Secret is either cert-manager's or yours" -}}
{{- end -}}
{{- if .Values.webhook.certManager.enabled -}}certManager{{- else if .Values.webhook.existingSecret -}}existingSecret{{- else -}}generated{{- end -}}
{{- end -}}
{{- define "gpustack-worker.webhookCerts" -}}
{{- if not (hasKey .Values "__webhookCerts") -}}
{{- $svc := include "gpustack-worker.webhookServiceName" . -}}
{{- $ns := include "gpustack-worker.namespace" . -}}
{{- $data := dict -}}
{{- $secret := lookup "v1" "Secret" $ns (include "gpustack-worker.webhookSecretName" .) -}}
{{- if $secret -}}
{{- $data = $secret.data | default dict -}}
{{- end -}}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- $_ := set .Values "__webhookCerts" (dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key")) -}}
{{- else -}}
{{- $days := int .Values.webhook.certValidityDays -}}
{{- $ca := genCA (printf "%s-ca" $svc) $days -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) nil $names $days $ca -}}
{{- $_ := set .Values "__webhookCerts" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "gpustack-worker.webhookCABundle" -}}
{{- $mode := include "gpustack-worker.webhookMode" . -}}
{{- if eq $mode "generated" -}}
{{- include "gpustack-worker.webhookCerts" . -}}
{{- index .Values "__webhookCerts" "ca" -}}
{{- else if eq $mode "existingSecret" -}}
{{- if .Values.webhook.caBundle -}}
{{- .Values.webhook.caBundle -}}
{{- else -}}
{{- $secret := lookup "v1" "Secret" (include "gpustack-worker.namespace" .) .Values.webhook.existingSecret -}}
{{- $ca := index (($secret | default dict).data | default dict) "ca.crt" -}}
{{- if not $ca -}}
{{- fail (printf "webhook.existingSecret %s: no ca.crt found in namespace %s (helm template reads no cluster: set webhook.caBundle to the base64 PEM CA)" .Values.webhook.existingSecret (include "gpustack-worker.namespace" .)) -}}
{{- end -}}
{{- $ca -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* cert-manager's CA injector reads the Certificate named here. */ -}}
{{- define "gpustack-worker.webhookAnnotations" -}}
{{- if eq (include "gpustack-worker.webhookMode" .) "certManager" -}}
cert-manager.io/inject-ca-from: {{ printf "%s/%s-webhook" (include "gpustack-worker.namespace" .) (include "gpustack-worker.fullname" .) }}
{{- end -}}
{{- end -}}
