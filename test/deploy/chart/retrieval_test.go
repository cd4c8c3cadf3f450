package chart

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// sharedStores adds the shared retrieval stores (Weaviate, PostgreSQL)
// that more than one API replica needs.
func sharedStores(values map[string]any) map[string]any {
	merge(values, Values(
		"vectorStore.type", "weaviate",
		"vectorStore.weaviate.url", "http://weaviate.weaviate.svc:8080",
		"structuredStore.type", "postgres",
		"structuredStore.postgres.dsnSecret.name", "indexify-postgres",
	))
	return values
}

// merge sets every leaf of add in dst, keeping dst's other keys.
func merge(dst, add map[string]any) {
	for k, v := range add {
		sub, ok := v.(map[string]any)
		if d, ok2 := dst[k].(map[string]any); ok && ok2 {
			merge(d, sub)
			continue
		}
		dst[k] = v
	}
}

// checkRetrievalStores: the embedded stores' directories are on a
// writable volume the API container mounts (the root filesystem is
// read-only); several replicas use the shared stores only.
func checkRetrievalStores(t *testing.T, r *Rendered) {
	t.Helper()
	api := r.Deployments[apiName]
	ac := container(t, api.Spec.Template.Spec, "api")
	vols := map[string]corev1.Volume{}
	for _, v := range api.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	onDataVolume := func(flag string) {
		dir := mustArg(t, ac.Args, flag)
		for _, m := range ac.VolumeMounts {
			if strings.HasPrefix(dir, m.MountPath+"/") && !m.ReadOnly {
				if v := vols[m.Name]; v.EmptyDir == nil && v.PersistentVolumeClaim == nil {
					t.Errorf("%s=%s is on volume %s, neither emptyDir nor a claim", flag, dir, m.Name)
				}
				return
			}
		}
		t.Errorf("%s=%s is on no writable mounted volume (the root filesystem is read-only)", flag, dir)
	}
	vec, str := mustArg(t, ac.Args, "--vector-store"), mustArg(t, ac.Args, "--structured-store")
	switch vec {
	case "embedded":
		onDataVolume("--index-dir")
	case "weaviate":
		mustArg(t, ac.Args, "--weaviate-url")
	default:
		t.Errorf("--vector-store=%s", vec)
	}
	switch str {
	case "sqlite":
		onDataVolume("--sql-dir")
	case "postgres":
		mustArg(t, ac.Args, "--postgres-dsn-file") // in a Secret volume: checkFileFlags
	default:
		t.Errorf("--structured-store=%s", str)
	}
	if *api.Spec.Replicas > 1 && (vec != "weaviate" || str != "postgres") {
		t.Errorf("%d API replicas on per-replica stores %s/%s", *api.Spec.Replicas, vec, str)
	}
}

func TestRetrievalStores(t *testing.T) {
	// Defaults: embedded stores on the disk blob volume.
	r := mustRender(t, nil)
	ac := container(t, r.Deployments[apiName].Spec.Template.Spec, "api")
	for flag, want := range map[string]string{
		"--vector-store": "embedded", "--index-dir": "/var/lib/indexify/indexes",
		"--structured-store": "sqlite", "--sql-dir": "/var/lib/indexify/structured", "--sql-timeout": "5s",
	} {
		if got := mustArg(t, ac.Args, flag); got != want {
			t.Errorf("%s=%s, want %s", flag, got, want)
		}
	}
	if mountPath(t, ac, "data") != "/var/lib/indexify" {
		t.Errorf("embedded stores are not on the data volume")
	}
	checkRetrievalStores(t, r)

	// Shared stores with 3 replicas and S3 blobs: no data volume at all,
	// the DSN Secret mounted read-only and named by --postgres-dsn-file.
	r = mustRender(t, sharedStores(s3Values("server.replicas", 3,
		"structuredStore.postgres.dsnSecret.key", "url", "structuredStore.queryTimeout", "30s")))
	spec := r.Deployments[apiName].Spec.Template.Spec
	ac = container(t, spec, "api")
	for flag, want := range map[string]string{
		"--vector-store": "weaviate", "--weaviate-url": "http://weaviate.weaviate.svc:8080",
		"--structured-store": "postgres", "--postgres-dsn-file": mountPath(t, ac, "postgres-dsn") + "/url",
		"--sql-timeout": "30s",
	} {
		if got := mustArg(t, ac.Args, flag); got != want {
			t.Errorf("%s=%s, want %s", flag, got, want)
		}
	}
	for _, f := range []string{"--index-dir", "--sql-dir"} {
		if _, ok := argValue(ac.Args, f); ok {
			t.Errorf("shared stores with %s", f)
		}
	}
	if v := volume(t, spec, "postgres-dsn"); v.Secret == nil || v.Secret.SecretName != "indexify-postgres" {
		t.Errorf("postgres-dsn volume %+v", v)
	}
	for _, v := range spec.Volumes {
		if v.Name == "data" {
			t.Errorf("a data volume with shared stores only")
		}
	}
	for _, e := range ac.Env {
		if strings.Contains(strings.ToLower(e.Name), "postgres") {
			t.Errorf("DSN in env %s", e.Name)
		}
	}
	checkRetrievalStores(t, r)
	checkFileFlags(t, r)

	// S3 blobs with embedded stores: a data volume for them, the chart's
	// claim, a claim of the user's (by the current key or the one it
	// replaced) or an emptyDir.
	for _, c := range []struct {
		values map[string]any
		claim  string // "" = emptyDir
	}{
		{s3Values(), apiName + "-data"},
		{s3Values("server.persistence.existingClaim", "indexify-data"), "indexify-data"},
		{s3Values("server.data.existingClaim", "indexify-data"), "indexify-data"},
		{s3Values("server.persistence.enabled", false), ""},
	} {
		r = mustRender(t, c.values)
		spec = r.Deployments[apiName].Spec.Template.Spec
		ac = container(t, spec, "api")
		v := volume(t, spec, "data")
		pvc := c.claim != ""
		if pvc != (v.PersistentVolumeClaim != nil) || (pvc && v.PersistentVolumeClaim.ClaimName != c.claim) || (!pvc && v.EmptyDir == nil) {
			t.Errorf("claim %q: data volume %+v", c.claim, v)
		}
		if mountPath(t, ac, "data") != "/var/lib/indexify" {
			t.Errorf("data volume mounted at %s", mountPath(t, ac, "data"))
		}
		checkRetrievalStores(t, r)
	}

	// One shared store, one embedded (1 replica).
	r = mustRender(t, Values("vectorStore.type", "weaviate", "vectorStore.weaviate.url", "https://weaviate.example.com"))
	checkRetrievalStores(t, r)
	if _, ok := argValue(container(t, r.Deployments[apiName].Spec.Template.Spec, "api").Args, "--weaviate-api-key-file"); ok {
		t.Errorf("a Weaviate API key file without apiKeySecret")
	}

	// A Weaviate API key: its Secret mounted read-only, named by
	// --weaviate-api-key-file, never in a flag value or env.
	r = mustRender(t, sharedStores(s3Values("server.replicas", 2,
		"vectorStore.weaviate.apiKeySecret.name", "indexify-weaviate", "vectorStore.weaviate.apiKeySecret.key", "key")))
	spec = r.Deployments[apiName].Spec.Template.Spec
	ac = container(t, spec, "api")
	if got, want := mustArg(t, ac.Args, "--weaviate-api-key-file"), mountPath(t, ac, "weaviate-api-key")+"/key"; got != want {
		t.Errorf("--weaviate-api-key-file=%s, want %s", got, want)
	}
	if v := volume(t, spec, "weaviate-api-key"); v.Secret == nil || v.Secret.SecretName != "indexify-weaviate" {
		t.Errorf("weaviate-api-key volume %+v", v)
	}
	for _, m := range ac.VolumeMounts {
		if m.Name == "weaviate-api-key" && !m.ReadOnly {
			t.Errorf("the Weaviate key's volume is mounted writable")
		}
	}
	for _, e := range ac.Env {
		if strings.Contains(strings.ToLower(e.Name), "weaviate") {
			t.Errorf("Weaviate key in env %s", e.Name)
		}
	}
	checkRetrievalStores(t, r)
	checkFileFlags(t, r)
}

// More than one API replica: only with both shared stores (and shared blobs).
func TestAPIReplicasNeedSharedRetrievalStores(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string // "" = renders
	}{
		{"s3, 2 replicas, embedded stores", s3Values("server.replicas", 2), "vectorStore.type is embedded"},
		{"s3, 2 replicas, weaviate and sqlite", s3Values("server.replicas", 2,
			"vectorStore.type", "weaviate", "vectorStore.weaviate.url", "http://w:8080"), "structuredStore.type is sqlite"},
		{"s3, 2 replicas, embedded and postgres", s3Values("server.replicas", 2,
			"structuredStore.type", "postgres", "structuredStore.postgres.dsnSecret.name", "pg"), "vectorStore.type is embedded"},
		{"shared claim, 2 replicas, embedded stores", Values("server.replicas", 2, "server.blob.existingClaim", "rwx"), "vectorStore.type is embedded"},
		{"s3, 2 replicas, shared stores", sharedStores(s3Values("server.replicas", 2)), ""},
		{"shared claim, 3 replicas, shared stores", sharedStores(Values("server.replicas", 3, "server.blob.existingClaim", "rwx")), ""},
		{"1 replica, embedded stores", Values("server.replicas", 1), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Render(c.values)
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "or use 1 replica") {
					t.Fatalf("rendered or failed for another reason: %v (want %q)", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkRetrievalStores(t, r)
		})
	}
}

func TestBadRetrievalValuesFail(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"unknown vector store", Values("vectorStore.type", "qdrant"), "/vectorStore/type"},
		{"unknown structured store", Values("structuredStore.type", "mysql"), "/structuredStore/type"},
		{"weaviate without url", Values("vectorStore.type", "weaviate"), "vectorStore.weaviate.url is empty"},
		{"weaviate url with a path", Values("vectorStore.type", "weaviate", "vectorStore.weaviate.url", "http://w:8080/v1"), "url"},
		{"url without weaviate", Values("vectorStore.weaviate.url", "http://w:8080"), "vectorStore.type is embedded"},
		{"postgres without secret", Values("structuredStore.type", "postgres"), "dsnSecret.name is empty"},
		{"secret without postgres", Values("structuredStore.postgres.dsnSecret.name", "pg"), "structuredStore.type is sqlite"},
		{"weaviate key without weaviate", Values("vectorStore.weaviate.apiKeySecret.name", "wv"), "vectorStore.type is embedded"},
		{"bad weaviate key secret name", Values("vectorStore.type", "weaviate", "vectorStore.weaviate.url", "http://w:8080",
			"vectorStore.weaviate.apiKeySecret.name", "WV_KEY"), "apiKeySecret"},
		{"weaviate key as a value", Values("vectorStore.weaviate.apiKey", "secret"), "apiKey"},
		{"bad secret name", Values("structuredStore.type", "postgres", "structuredStore.postgres.dsnSecret.name", "PG_DSN"), "name"},
		{"dsn as a value", Values("structuredStore.postgres.dsn", "postgres://u:p@h/db"), "dsn"},
		{"bad query timeout", Values("structuredStore.queryTimeout", "5"), "queryTimeout"},
		{"data claim with disk blobs", Values("server.data.existingClaim", "d"), "server.persistence.existingClaim"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render succeeded or failed for another reason: %v (want %q)", err, c.want)
			}
		})
	}
}
