{{/*
Blob storage of the API servers: disk (on the API server's data volume,
_apidata.tpl) or an S3 bucket that every replica shares. Credentials never appear
as flags or plain env values: they come from a Secret via secretKeyRef.
*/}}

{{- define "indexify.blob.s3" -}}
{{- eq .Values.blobStorage.type "s3" }}
{{- end }}

{{- define "indexify.blob.validate" -}}
{{- $b := .Values.blobStorage }}
{{- if eq $b.type "s3" }}
{{- if not $b.s3.bucket }}
{{- fail "blobStorage.type is s3 but blobStorage.s3.bucket is empty" }}
{{- end }}
{{- if and (not $b.s3.credentialsSecret.name) (not $b.s3.iam) }}
{{- fail "blobStorage.type is s3 but there are no credentials: set blobStorage.s3.credentialsSecret.name (a Secret with the access key id and secret access key) or blobStorage.s3.iam=true" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "indexify.blob.args" -}}
{{- $b := .Values.blobStorage }}
{{- if eq $b.type "s3" }}
- --blob-store=s3
- --s3-bucket={{ $b.s3.bucket }}
- --s3-region={{ $b.s3.region }}
{{- with $b.s3.endpoint }}
- --s3-endpoint={{ . }}
{{- end }}
{{- if $b.s3.pathStyle }}
- --s3-path-style
{{- end }}
{{- with $b.s3.prefix }}
- --s3-prefix={{ . }}
{{- end }}
{{- if $b.s3.iam }}
- --s3-iam
{{- end }}
{{- if $b.s3.createBucket }}
- --s3-create-bucket
{{- end }}
{{- if $b.s3.caSecret.name }}
- --s3-ca-file=/etc/indexify-secrets/s3-ca/{{ $b.s3.caSecret.key }}
{{- end }}
{{- else }}
- --blob-store=disk
- --blob-dir=/var/lib/indexify/blobs
{{- end }}
{{- end }}

{{- define "indexify.blob.env" -}}
{{- $b := .Values.blobStorage }}
{{- if and (eq $b.type "s3") $b.s3.credentialsSecret.name }}
{{- $c := $b.s3.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $c.name }}
      key: {{ $c.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $c.name }}
      key: {{ $c.secretAccessKeyKey }}
{{- end }}
{{- end }}

{{- define "indexify.blob.volumeMount" -}}
{{- $b := .Values.blobStorage }}
{{- if eq $b.type "s3" }}
{{- if $b.s3.caSecret.name }}
- name: s3-ca
  mountPath: /etc/indexify-secrets/s3-ca
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{- define "indexify.blob.volume" -}}
{{- $b := .Values.blobStorage }}
{{- if eq $b.type "s3" }}
{{- if $b.s3.caSecret.name }}
- name: s3-ca
  secret:
    secretName: {{ $b.s3.caSecret.name }}
{{- end }}
{{- end }}
{{- end }}
