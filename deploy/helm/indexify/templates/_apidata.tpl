{{/*
The API server's local state, all on one volume ("data", mounted at
/var/lib/indexify): the uploaded files' bytes with disk blobs (blobs/), the
embedded vector index (indexes/) and the SQLite files (structured/). The
coordinators list content whose bytes and search/SQL rows live only there,
so by default the volume is a PersistentVolumeClaim the chart makes and
keeps on uninstall; an emptyDir (server.persistence.enabled=false) loses all
of it with every API pod replacement. With S3 blobs, Weaviate and PostgreSQL
the API server keeps nothing locally and has no such volume.
*/}}

{{/* "true" when the API server keeps anything on its own disk. */}}
{{- define "indexify.api.local" -}}
{{- if or (not (include "indexify.blob.s3" . | eq "true")) (include "indexify.retrieval.embedded" .) }}true{{ end }}
{{- end }}

{{/*
The claim the user names: server.persistence.existingClaim, or one of the
keys it replaces (server.blob.existingClaim for disk blobs,
server.data.existingClaim for S3 blobs with an embedded store), which keep
working with the meaning they had.
*/}}
{{- define "indexify.api.existingClaim" -}}
{{- $s := .Values.server }}
{{- $p := $s.persistence.existingClaim }}
{{- $b := dig "blob" "existingClaim" "" $s }}
{{- $d := dig "data" "existingClaim" "" $s }}
{{- $p | default $b | default $d }}
{{- end }}

{{/* "true" when the chart makes the claim (<release>-api-data). */}}
{{- define "indexify.api.makesClaim" -}}
{{- if and (include "indexify.api.local" .) .Values.server.persistence.enabled (not (include "indexify.api.existingClaim" .)) }}true{{ end }}
{{- end }}

{{- define "indexify.api.claimName" -}}
{{- if include "indexify.api.makesClaim" . }}
{{- printf "%s-data" (include "indexify.api.name" .) }}
{{- else if include "indexify.api.local" . }}
{{- include "indexify.api.existingClaim" . }}
{{- end }}
{{- end }}

{{/*
Recreate, not RollingUpdate, when the state is on a claim and one pod runs:
two pods must never open the same embedded index and SQLite files at once,
and a ReadWriteOnce volume cannot be attached to a surge pod on another
node. Several replicas share a ReadWriteMany claim (and the shared stores),
so they roll; so does a pod whose state is on an emptyDir, or that has none.
*/}}
{{- define "indexify.api.recreate" -}}
{{- $s := .Values.server }}
{{- if and (include "indexify.api.claimName" .) (le (int $s.replicas) 1) }}
{{- if or (include "indexify.retrieval.embedded" .) (ne $s.persistence.accessMode "ReadWriteMany") }}true{{ end }}
{{- end }}
{{- end }}

{{- define "indexify.api.validate" -}}
{{- $s := .Values.server }}
{{- $p := $s.persistence }}
{{- $b := dig "blob" "existingClaim" "" $s }}
{{- $d := dig "data" "existingClaim" "" $s }}
{{- $s3 := include "indexify.blob.s3" . | eq "true" }}
{{- if and $b $s3 }}
{{- fail "server.blob.existingClaim is a disk setting but blobStorage.type is s3: remove it, or name the claim in server.persistence.existingClaim (it holds the embedded stores' files)" }}
{{- end }}
{{- if and $d (not $s3) }}
{{- fail "server.data.existingClaim is for blobStorage.type=s3; with disk blobs use server.persistence.existingClaim (server.blob.existingClaim before): one claim holds the blobs and the embedded stores' files" }}
{{- end }}
{{- $named := list }}
{{- range (list $p.existingClaim $b $d) }}
{{- if and . (not (has . $named)) }}
{{- $named = append $named . }}
{{- end }}
{{- end }}
{{- if gt (len $named) 1 }}
{{- fail (printf "two different claims for the API server's data: %s. server.persistence.existingClaim replaces server.blob.existingClaim and server.data.existingClaim: set only it" (join ", " $named)) }}
{{- end }}
{{- $claim := include "indexify.api.existingClaim" . }}
{{- if and $claim (not $p.enabled) }}
{{- fail (printf "server.persistence.enabled is false but a claim (%s) is named for the API server's data: remove the claim for an emptyDir, or set enabled back to true" $claim) }}
{{- end }}
{{- if and $claim (not (include "indexify.api.local" .)) }}
{{- fail (printf "a claim (%s) is named for the API server's data, but with S3 blobs, vectorStore.type=weaviate and structuredStore.type=postgres it keeps nothing on disk: remove it" $claim) }}
{{- end }}
{{- if and (gt (int $s.replicas) 1) (include "indexify.api.local" .) }}
{{- if not $p.enabled }}
{{- fail (printf "server.replicas is %v but server.persistence.enabled is false: blobs would be on an emptyDir per pod, and executors and clients would miss blobs stored by another replica. Set blobStorage.type=s3, or a ReadWriteMany claim (server.persistence), or use 1 replica." $s.replicas) }}
{{- end }}
{{- if and (include "indexify.api.makesClaim" .) (ne $p.accessMode "ReadWriteMany") }}
{{- fail (printf "server.replicas is %v but the API server's data is on the %s claim the chart makes: a second pod cannot share it (on another node it cannot even attach it). Set blobStorage.type=s3 (the API server then needs no volume), or server.persistence.accessMode=ReadWriteMany with a storage class that offers it, or server.persistence.existingClaim to a ReadWriteMany claim, or use 1 replica." $s.replicas $p.accessMode) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "indexify.api.strategy" -}}
{{- if include "indexify.api.recreate" . }}
type: Recreate
# null, not absent: an upgrade from RollingUpdate must remove the field
rollingUpdate: null
{{- else }}
type: RollingUpdate
rollingUpdate:
  maxSurge: 1
  maxUnavailable: 0
{{- end }}
{{- end }}

{{- define "indexify.api.dataVolumeMount" -}}
{{- if include "indexify.api.local" . }}
- name: data
  mountPath: /var/lib/indexify
{{- end }}
{{- end }}

{{- define "indexify.api.dataVolume" -}}
{{- if include "indexify.api.local" . }}
- name: data
  {{- with include "indexify.api.claimName" . }}
  persistentVolumeClaim:
    claimName: {{ . }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end }}
{{- end }}
