{{/*
Names. Resources are named relative to the release; nothing here knows the
namespace: pods reach each other with short DNS names that resolve in their
own namespace, so the chart installs into any namespace unchanged.
*/}}

{{- define "indexify.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "indexify.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "indexify.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "indexify.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: (dict "root" $ "component" "api") */}}
{{- define "indexify.selectorLabels" -}}
app.kubernetes.io/name: {{ include "indexify.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "indexify.image" -}}
{{- $img := .Values.image }}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
{{- end }}

{{/* StatefulSet name; pods are <this>-0, <this>-1, ... and that is their Raft id. */}}
{{- define "indexify.coordinator.name" -}}
{{- printf "%s-coordinator" (include "indexify.fullname" .) }}
{{- end }}

{{/* Peer service: every pod, ready or not (DNS for Raft and joins). */}}
{{- define "indexify.coordinator.headless" -}}
{{- printf "%s-coordinator-headless" (include "indexify.fullname" .) }}
{{- end }}

{{/* Client service: ready pods only. */}}
{{- define "indexify.coordinator.client" -}}
{{- printf "%s-coordinator" (include "indexify.fullname" .) }}
{{- end }}

{{- define "indexify.api.name" -}}
{{- printf "%s-api" (include "indexify.fullname" .) }}
{{- end }}

{{/*
The replica count, validated: Raft needs a majority, and an even count only
adds a member without adding fault tolerance (4 tolerates 1 failure, like 3).
*/}}
{{- define "indexify.coordinator.replicas" -}}
{{- $r := .Values.coordinator.replicas }}
{{- $n := int $r }}
{{- if or (lt $n 1) (eq (mod $n 2) 0) (ne (toString $n) (toString $r)) }}
{{- fail (printf "coordinator.replicas must be an odd number >= 1 (1, 3, 5, 7): got %v. An even count tolerates no more failures than the odd count below it and can split votes evenly." $r) }}
{{- end }}
{{- $n }}
{{- end }}

{{/* Raft quorum of the desired cluster size. */}}
{{- define "indexify.coordinator.quorum" -}}
{{- add (div (int (include "indexify.coordinator.replicas" .)) 2) 1 }}
{{- end }}

{{/*
THE address helper: the stable DNS name of one coordinator pod through the
headless service, with a port. Used for --advertise (Raft), for
--coordinator-advertise (gRPC) and for every --join entry, so the three can
never disagree. pod is a pod name or "$(POD_NAME)" (expanded by the kubelet).
(dict "root" $ "pod" "$(POD_NAME)" "port" 8970)
*/}}
{{- define "indexify.coordinator.podAddress" -}}
{{- printf "%s.%s:%v" .pod (include "indexify.coordinator.headless" .root) .port }}
{{- end }}

{{/*
Static bootstrap list: <sts>-0=<sts>-0.<headless>:8950,... generated from the
replica count. Static mode lets any majority of these pods form the cluster
(pod 0 is not special) and every pod computes the same voter list.
*/}}
{{- define "indexify.coordinator.join" -}}
{{- $sts := include "indexify.coordinator.name" . }}
{{- $out := list }}
{{- range $i := until (int (include "indexify.coordinator.replicas" .)) }}
{{- $pod := printf "%s-%d" $sts $i }}
{{- $out = append $out (printf "%s=%s" $pod (include "indexify.coordinator.podAddress" (dict "root" $ "pod" $pod "port" 8950))) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* What API servers and executors dial: the client service, re-resolved. */}}
{{- define "indexify.coordinator.clientAddr" -}}
{{- printf "dns:%s:8950" (include "indexify.coordinator.client" .) }}
{{- end }}

{{- define "indexify.api.url" -}}
{{- printf "%s://%s:%v" (ternary "https" "http" .Values.tls.enabled) (include "indexify.api.name" .) .Values.server.service.port }}
{{- end }}

{{/*
TLS. The --tls-* flags belong to the security work (issue 7); the chart
renders them so a release switches TLS on with one value.
*/}}
{{- define "indexify.tls.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled is true but tls.secretName is empty: name the kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) to mount" }}
{{- end }}
{{- end }}

{{- define "indexify.tls.args" -}}
{{- if .Values.tls.enabled }}
- --tls-cert-file=/etc/indexify-secrets/tls/tls.crt
- --tls-key-file=/etc/indexify-secrets/tls/tls.key
- --tls-ca-file=/etc/indexify-secrets/tls/ca.crt
{{- end }}
{{- end }}

{{- define "indexify.tls.volumeMount" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/indexify-secrets/tls
  readOnly: true
{{- end }}
{{- end }}

{{- define "indexify.tls.volume" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- end }}
