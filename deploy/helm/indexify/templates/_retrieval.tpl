{{/*
Retrieval stores of the API servers: where embeddings are indexed
(vectorStore) and where extracted metadata is kept for SQL
(structuredStore). The embedded stores are files on the API server's data
volume (_apidata.tpl) and serve one replica; several replicas need the shared ones
(Weaviate and PostgreSQL). The PostgreSQL connection string (it holds a
password) and the Weaviate API key come from Secrets mounted as files,
never flag values.
*/}}

{{- define "indexify.retrieval.embedded" -}}
{{- if or (eq .Values.vectorStore.type "embedded") (eq .Values.structuredStore.type "sqlite") }}true{{ end }}
{{- end }}

{{- define "indexify.retrieval.validate" -}}
{{- $v := .Values.vectorStore }}
{{- $q := .Values.structuredStore }}
{{- $s := .Values.server }}
{{- if and (eq $v.type "weaviate") (not $v.weaviate.url) }}
{{- fail "vectorStore.type is weaviate but vectorStore.weaviate.url is empty: set it to the Weaviate REST endpoint, e.g. http://weaviate.weaviate.svc:8080" }}
{{- end }}
{{- if and (eq $v.type "embedded") $v.weaviate.url }}
{{- fail "vectorStore.weaviate.url is set but vectorStore.type is embedded: set vectorStore.type=weaviate or remove the URL" }}
{{- end }}
{{- if and (eq $v.type "embedded") $v.weaviate.apiKeySecret.name }}
{{- fail "vectorStore.weaviate.apiKeySecret.name is set but vectorStore.type is embedded: set vectorStore.type=weaviate or remove the Secret name" }}
{{- end }}
{{- if and (eq $q.type "postgres") (not $q.postgres.dsnSecret.name) }}
{{- fail "structuredStore.type is postgres but structuredStore.postgres.dsnSecret.name is empty: create a Secret holding the connection string (postgres://user:password@host:5432/db) and name it here" }}
{{- end }}
{{- if and (eq $q.type "sqlite") $q.postgres.dsnSecret.name }}
{{- fail "structuredStore.postgres.dsnSecret.name is set but structuredStore.type is sqlite: set structuredStore.type=postgres or remove the Secret name" }}
{{- end }}
{{- if gt (int $s.replicas) 1 }}
{{- if eq $v.type "embedded" }}
{{- fail (printf "server.replicas is %v but vectorStore.type is embedded: each replica would index into its own files and searches would miss what another replica indexed. Set vectorStore.type=weaviate (and vectorStore.weaviate.url), or use 1 replica." $s.replicas) }}
{{- end }}
{{- if eq $q.type "sqlite" }}
{{- fail (printf "server.replicas is %v but structuredStore.type is sqlite: each replica would keep its own tables and SQL would miss rows stored by another replica. Set structuredStore.type=postgres (and structuredStore.postgres.dsnSecret), or use 1 replica." $s.replicas) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "indexify.retrieval.args" -}}
{{- $v := .Values.vectorStore }}
{{- $q := .Values.structuredStore }}
- --vector-store={{ $v.type }}
{{- if eq $v.type "weaviate" }}
- --weaviate-url={{ $v.weaviate.url }}
{{- if $v.weaviate.apiKeySecret.name }}
- --weaviate-api-key-file=/etc/indexify-secrets/weaviate/{{ $v.weaviate.apiKeySecret.key }}
{{- end }}
{{- else }}
- --index-dir=/var/lib/indexify/indexes
{{- end }}
- --structured-store={{ $q.type }}
{{- if eq $q.type "postgres" }}
- --postgres-dsn-file=/etc/indexify-secrets/postgres/{{ $q.postgres.dsnSecret.key }}
{{- else }}
- --sql-dir=/var/lib/indexify/structured
{{- end }}
- --sql-timeout={{ $q.queryTimeout }}
{{- end }}

{{/* The embedded stores' files are on the API server's data volume
(_apidata.tpl); these are the shared stores' Secrets. */}}
{{- define "indexify.retrieval.volumeMount" -}}
{{- if eq .Values.structuredStore.type "postgres" }}
- name: postgres-dsn
  mountPath: /etc/indexify-secrets/postgres
  readOnly: true
{{- end }}
{{- if include "indexify.retrieval.weaviateKey" . }}
- name: weaviate-api-key
  mountPath: /etc/indexify-secrets/weaviate
  readOnly: true
{{- end }}
{{- end }}

{{- define "indexify.retrieval.weaviateKey" -}}
{{- if and (eq .Values.vectorStore.type "weaviate") .Values.vectorStore.weaviate.apiKeySecret.name }}true{{ end }}
{{- end }}

{{- define "indexify.retrieval.volume" -}}
{{- if eq .Values.structuredStore.type "postgres" }}
- name: postgres-dsn
  secret:
    secretName: {{ .Values.structuredStore.postgres.dsnSecret.name }}
{{- end }}
{{- if include "indexify.retrieval.weaviateKey" . }}
- name: weaviate-api-key
  secret:
    secretName: {{ .Values.vectorStore.weaviate.apiKeySecret.name }}
{{- end }}
{{- end }}
