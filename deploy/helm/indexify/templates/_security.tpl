{{/*
Shared secrets beyond TLS (docs/security.md): the cluster secret
(coordinators, and API servers for GET /cluster), the API servers' token
list and each executor group's own token. Each is a Secret mounted as a
directory, so the kubelet's atomic update reaches the files that the
processes re-read (tokens) or read at start (cluster secret).
*/}}

{{- define "indexify.security.validate" -}}
{{- if and (eq .Values.tls.clientAuth "require") (not .Values.tls.enabled) }}
{{- fail "tls.clientAuth is require but tls.enabled is false: mutual TLS needs the TLS Secret" }}
{{- end }}
{{- if .Values.apiTokens.secretName }}
{{- range .Values.executors }}
{{- if not (get . "apiTokenSecret") }}
{{- fail (printf "apiTokens.secretName is set but executor group %q has no apiTokenSecret: its downloads and result uploads would be refused with 401" .name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* --tls-client-auth goes with the other TLS flags (every component). */}}
{{- define "indexify.tls.clientAuthArg" -}}
{{- if .Values.tls.enabled }}
- --tls-client-auth={{ .Values.tls.clientAuth }}
{{- end }}
{{- end }}

{{- define "indexify.clusterSecret.args" -}}
{{- with .Values.clusterSecret.secretName }}
- --cluster-secret-file=/etc/indexify-secrets/cluster-secret/{{ $.Values.clusterSecret.key }}
{{- end }}
{{- end }}

{{- define "indexify.clusterSecret.volumeMount" -}}
{{- if .Values.clusterSecret.secretName }}
- name: cluster-secret
  mountPath: /etc/indexify-secrets/cluster-secret
  readOnly: true
{{- end }}
{{- end }}

{{- define "indexify.clusterSecret.volume" -}}
{{- with .Values.clusterSecret.secretName }}
- name: cluster-secret
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}

{{- define "indexify.apiTokens.args" -}}
{{- with .Values.apiTokens.secretName }}
- --api-tokens-file=/etc/indexify-secrets/api-tokens/{{ $.Values.apiTokens.key }}
{{- end }}
{{- end }}

{{- define "indexify.apiTokens.volumeMount" -}}
{{- if .Values.apiTokens.secretName }}
- name: api-tokens
  mountPath: /etc/indexify-secrets/api-tokens
  readOnly: true
{{- end }}
{{- end }}

{{- define "indexify.apiTokens.volume" -}}
{{- with .Values.apiTokens.secretName }}
- name: api-tokens
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}

{{/*
The Secret mounts are not below /etc/indexify: the coordinator mounts its
ConfigMap there read-only, and a runtime cannot create a mount point
inside a read-only volume.
*/}}
