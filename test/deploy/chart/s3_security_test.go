package chart

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// s3Values is an S3 blob store on a private endpoint with a key Secret.
func s3Values(kv ...any) map[string]any {
	return Values(append([]any{
		"blobStorage.type", "s3",
		"blobStorage.s3.bucket", "indexify-blobs",
		"blobStorage.s3.region", "eu-west-1",
		"blobStorage.s3.endpoint", "http://minio:9000",
		"blobStorage.s3.pathStyle", true,
		"blobStorage.s3.credentialsSecret.name", "indexify-s3",
	}, kv...)...)
}

// s3SecurityValues switches on everything this file covers at once.
func s3SecurityValues() map[string]any {
	return sharedStores(s3Values(
		"server.replicas", 3,
		"blobStorage.s3.caSecret.name", "s3-ca",
		"tls.enabled", true, "tls.secretName", "indexify-tls", "tls.clientAuth", "require",
		"clusterSecret.secretName", "indexify-cluster",
		"apiTokens.secretName", "indexify-tokens",
		"executors", []any{map[string]any{"name": "default", "apiTokenSecret": "indexify-executor-token"}},
	))
}

// checkFileFlags: every --*-file flag of every container names a file
// inside a volume the container mounts, and that volume is a Secret or
// ConfigMap (files the chart provides, not ones a process must create).
func checkFileFlags(t *testing.T, r *Rendered) {
	t.Helper()
	for w, tpl := range podTemplates(r) {
		vols := map[string]corev1.Volume{}
		for _, v := range tpl.Spec.Volumes {
			vols[v.Name] = v
		}
		for _, c := range tpl.Spec.Containers {
			for _, a := range c.Args {
				flag, path, ok := strings.Cut(a, "=")
				if !ok || !strings.HasSuffix(flag, "-file") {
					continue
				}
				var in *corev1.VolumeMount
				for i, m := range c.VolumeMounts {
					if strings.HasPrefix(path, m.MountPath+"/") {
						in = &c.VolumeMounts[i]
					}
				}
				if in == nil {
					t.Errorf("%s/%s: %s is in no mounted volume", w, c.Name, a)
					continue
				}
				v := vols[in.Name]
				if v.Secret == nil && v.ConfigMap == nil {
					t.Errorf("%s/%s: %s is in volume %s, neither a Secret nor a ConfigMap", w, c.Name, a, in.Name)
				}
				if v.Secret != nil && v.Secret.SecretName == "" {
					t.Errorf("%s/%s: %s: Secret volume %s without a name", w, c.Name, a, in.Name)
				}
			}
		}
	}
}

// checkBlobStore: the API server's blob flags, volumes and credentials
// agree with each other and with the replica count.
func checkBlobStore(t *testing.T, r *Rendered) {
	t.Helper()
	api := r.Deployments[apiName]
	ac := container(t, api.Spec.Template.Spec, "api")
	store := mustArg(t, ac.Args, "--blob-store")
	hasDataVolume := slices.ContainsFunc(api.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" })
	embedded := mustArg(t, ac.Args, "--vector-store") == "embedded" || mustArg(t, ac.Args, "--structured-store") == "sqlite"
	var credEnv []corev1.EnvVar
	for _, e := range ac.Env {
		if strings.HasPrefix(e.Name, "AWS_") {
			credEnv = append(credEnv, e)
		}
	}
	switch store {
	case "disk":
		if !hasDataVolume || len(credEnv) != 0 {
			t.Errorf("disk store: data volume %v, AWS env %v", hasDataVolume, credEnv)
		}
		for _, a := range ac.Args {
			if strings.HasPrefix(a, "--s3-") {
				t.Errorf("disk store with S3 flag %s", a)
			}
		}
		// Several replicas each with its own emptyDir would lose blobs.
		if *api.Spec.Replicas > 1 && volume(t, api.Spec.Template.Spec, "data").PersistentVolumeClaim == nil {
			t.Errorf("%d API replicas on per-pod blob volumes", *api.Spec.Replicas)
		}
	case "s3":
		// A data volume only for the embedded stores' files.
		if hasDataVolume != embedded {
			t.Errorf("s3 store: data volume %v with embedded stores %v", hasDataVolume, embedded)
		}
		if _, ok := argValue(ac.Args, "--blob-dir"); ok {
			t.Errorf("s3 store with --blob-dir")
		}
		mustArg(t, ac.Args, "--s3-bucket")
		// Credentials only through secretKeyRef: never plain values.
		for _, e := range credEnv {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name == "" || e.ValueFrom.SecretKeyRef.Key == "" {
				t.Errorf("%s is not read from a Secret: %+v", e.Name, e)
			}
		}
		if len(credEnv) != 2 && !slices.Contains(ac.Args, "--s3-iam") {
			t.Errorf("s3 store without credentials: env %v", credEnv)
		}
	default:
		t.Errorf("--blob-store=%s", store)
	}
}

func envVar(t *testing.T, c corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("container %s has no env %s: %+v", c.Name, name, c.Env)
	return corev1.EnvVar{}
}

func TestS3BlobStorage(t *testing.T) {
	r := mustRender(t, sharedStores(s3Values("server.replicas", 3, "blobStorage.s3.prefix", "prod/",
		"blobStorage.s3.createBucket", true, "blobStorage.s3.caSecret.name", "s3-ca",
		"server.extraEnv", []any{map[string]any{"name": "GOMAXPROCS", "value": "2"}})))
	api := r.Deployments[apiName]
	if *api.Spec.Replicas != 3 {
		t.Fatalf("API replicas %d, want 3", *api.Spec.Replicas)
	}
	ac := container(t, api.Spec.Template.Spec, "api")
	for flag, want := range map[string]string{
		"--blob-store": "s3", "--s3-bucket": "indexify-blobs", "--s3-region": "eu-west-1",
		"--s3-endpoint": "http://minio:9000", "--s3-prefix": "prod/",
		"--s3-ca-file": mountPath(t, ac, "s3-ca") + "/ca.crt",
	} {
		if got := mustArg(t, ac.Args, flag); got != want {
			t.Errorf("%s=%s, want %s", flag, got, want)
		}
	}
	for _, f := range []string{"--s3-path-style", "--s3-create-bucket"} {
		if !slices.Contains(ac.Args, f) {
			t.Errorf("no %s in %q", f, ac.Args)
		}
	}
	if slices.Contains(ac.Args, "--s3-iam") {
		t.Errorf("--s3-iam without blobStorage.s3.iam")
	}
	if v := volume(t, api.Spec.Template.Spec, "s3-ca"); v.Secret == nil || v.Secret.SecretName != "s3-ca" {
		t.Errorf("s3-ca volume %+v", v)
	}
	for name, key := range map[string]string{"AWS_ACCESS_KEY_ID": "access-key-id", "AWS_SECRET_ACCESS_KEY": "secret-access-key"} {
		ref := envVar(t, ac, name).ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "indexify-s3" || ref.SecretKeyRef.Key != key {
			t.Errorf("%s from %+v, want Secret indexify-s3 key %s", name, ref, key)
		}
	}
	if envVar(t, ac, "GOMAXPROCS").Value != "2" {
		t.Errorf("extraEnv lost next to the credentials")
	}
	// Executors and coordinators never see the S3 credentials or flags.
	for w, tpl := range podTemplates(r) {
		if w == apiName {
			continue
		}
		for _, c := range tpl.Spec.Containers {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "AWS_") {
					t.Errorf("%s has %s", w, e.Name)
				}
			}
		}
	}

	// Custom key names and IAM.
	r = mustRender(t, s3Values("blobStorage.s3.credentialsSecret.accessKeyIdKey", "id",
		"blobStorage.s3.credentialsSecret.secretAccessKeyKey", "secret", "blobStorage.s3.iam", true))
	ac = container(t, r.Deployments[apiName].Spec.Template.Spec, "api")
	if envVar(t, ac, "AWS_ACCESS_KEY_ID").ValueFrom.SecretKeyRef.Key != "id" ||
		envVar(t, ac, "AWS_SECRET_ACCESS_KEY").ValueFrom.SecretKeyRef.Key != "secret" || !slices.Contains(ac.Args, "--s3-iam") {
		t.Errorf("custom keys / iam not applied: %q %+v", ac.Args, ac.Env)
	}
	// IAM only: no key env at all.
	r = mustRender(t, s3Values("blobStorage.s3.credentialsSecret.name", "", "blobStorage.s3.iam", true))
	ac = container(t, r.Deployments[apiName].Spec.Template.Spec, "api")
	if len(ac.Env) != 0 {
		t.Errorf("IAM only: env %+v", ac.Env)
	}
}

// More than one API server: allowed with S3 or a shared (ReadWriteMany)
// claim, refused with per-pod emptyDirs or the ReadWriteOnce claim the chart
// makes by default.
func TestAPIReplicasNeedSharedBlobs(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string // "" = renders
	}{
		{"disk, 1 replica", Values("server.replicas", 1), ""},
		{"disk, 2 replicas, the chart's claim", sharedStores(Values("server.replicas", 2)), "ReadWriteOnce claim the chart makes"},
		{"disk, 2 replicas, explicit type", sharedStores(Values("server.replicas", 2, "blobStorage.type", "disk")), "ReadWriteOnce claim the chart makes"},
		{"disk, 2 replicas, ReadWriteOncePod", sharedStores(Values("server.replicas", 2, "server.persistence.accessMode", "ReadWriteOncePod")), "ReadWriteOncePod claim the chart makes"},
		{"disk, 2 replicas, emptyDir", sharedStores(Values("server.replicas", 2, "server.persistence.enabled", false)), "emptyDir per pod"},
		{"disk, 2 replicas, the chart's ReadWriteMany claim", sharedStores(Values("server.replicas", 2, "server.persistence.accessMode", "ReadWriteMany")), ""},
		{"disk, 2 replicas, shared claim", sharedStores(Values("server.replicas", 2, "server.persistence.existingClaim", "rwx")), ""},
		{"disk, 2 replicas, shared claim by its former key", sharedStores(Values("server.replicas", 2, "server.blob.existingClaim", "rwx")), ""},
		{"s3, 2 replicas", sharedStores(s3Values("server.replicas", 2)), ""},
		{"s3, 5 replicas", sharedStores(s3Values("server.replicas", 5)), ""},
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
			checkBlobStore(t, r)
			checkAPIData(t, r)
		})
	}
}

func TestClusterSecret(t *testing.T) {
	r := mustRender(t, Values("clusterSecret.secretName", "indexify-cluster"))
	for w, tpl := range podTemplates(r) {
		c := tpl.Spec.Containers[0]
		path, has := argValue(c.Args, "--cluster-secret-file")
		// Coordinators need it for Raft and ClusterService; the API server
		// for GET /cluster; executors never call ClusterService.
		want := w == sts || w == apiName
		if has != want {
			t.Errorf("%s: --cluster-secret-file %v, want %v", w, has, want)
			continue
		}
		if !has {
			continue
		}
		if path != mountPath(t, c, "cluster-secret")+"/cluster-secret" {
			t.Errorf("%s: --cluster-secret-file=%s is not the mounted key", w, path)
		}
		if v := volume(t, tpl.Spec, "cluster-secret"); v.Secret == nil || v.Secret.SecretName != "indexify-cluster" {
			t.Errorf("%s: cluster-secret volume %+v", w, v)
		}
	}
	r = mustRender(t, Values("clusterSecret.secretName", "x", "clusterSecret.key", "secret.txt"))
	c := container(t, r.StatefulSets[sts].Spec.Template.Spec, "coordinator")
	if !strings.HasSuffix(mustArg(t, c.Args, "--cluster-secret-file"), "/secret.txt") {
		t.Errorf("clusterSecret.key ignored: %q", c.Args)
	}
}

func TestAPITokens(t *testing.T) {
	r := mustRender(t, Values("apiTokens.secretName", "tokens", "executors", []any{
		map[string]any{"name": "default", "apiTokenSecret": "exec-token"},
		map[string]any{"name": "gpu", "apiTokenSecret": "gpu-token", "apiTokenSecretKey": "t"},
	}))
	for w, tpl := range podTemplates(r) {
		c := tpl.Spec.Containers[0]
		tokens, hasTokens := argValue(c.Args, "--api-tokens-file")
		token, hasToken := argValue(c.Args, "--api-token-file")
		switch {
		case w == apiName:
			if !hasTokens || hasToken || tokens != mountPath(t, c, "api-tokens")+"/tokens.yaml" {
				t.Errorf("API server: tokens %q token %v", tokens, hasToken)
			}
			if v := volume(t, tpl.Spec, "api-tokens"); v.Secret == nil || v.Secret.SecretName != "tokens" {
				t.Errorf("api-tokens volume %+v", v)
			}
		case strings.Contains(w, "-executor-"):
			secret, key := "exec-token", "token"
			if strings.HasSuffix(w, "-gpu") {
				secret, key = "gpu-token", "t"
			}
			if hasTokens || !hasToken || token != mountPath(t, c, "api-token")+"/"+key {
				t.Errorf("%s: tokens %v token %q", w, hasTokens, token)
			}
			if v := volume(t, tpl.Spec, "api-token"); v.Secret == nil || v.Secret.SecretName != secret {
				t.Errorf("%s: api-token volume %+v", w, v)
			}
		default:
			if hasTokens || hasToken {
				t.Errorf("%s has token flags", w)
			}
		}
	}
	// Off by default.
	for w, tpl := range podTemplates(mustRender(t, nil)) {
		for _, a := range tpl.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--api-token") || strings.HasPrefix(a, "--cluster-secret") {
				t.Errorf("%s: %s by default", w, a)
			}
		}
	}
}

func TestTLSClientAuth(t *testing.T) {
	for _, mode := range []string{"none", "require"} {
		r := mustRender(t, Values("tls.enabled", true, "tls.secretName", "t", "tls.clientAuth", mode))
		for w, tpl := range podTemplates(r) {
			if got := mustArg(t, tpl.Spec.Containers[0].Args, "--tls-client-auth"); got != mode {
				t.Errorf("%s: --tls-client-auth=%s, want %s", w, got, mode)
			}
		}
	}
	for w, tpl := range podTemplates(mustRender(t, nil)) {
		if _, ok := argValue(tpl.Spec.Containers[0].Args, "--tls-client-auth"); ok {
			t.Errorf("%s: --tls-client-auth without TLS", w)
		}
	}
}

func TestBadS3AndSecurityValuesFail(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"unknown store", Values("blobStorage.type", "gcs"), "type"},
		{"s3 without bucket", s3Values("blobStorage.s3.bucket", ""), "bucket"},
		{"s3 bucket with capitals", s3Values("blobStorage.s3.bucket", "My_Bucket"), "bucket"},
		{"s3 without credentials", s3Values("blobStorage.s3.credentialsSecret.name", ""), "credentials"},
		{"s3 and a disk claim", s3Values("server.blob.existingClaim", "rwx"), "existingClaim"},
		{"s3 prefix without slash", s3Values("blobStorage.s3.prefix", "prod"), "prefix"},
		{"s3 endpoint with a path", s3Values("blobStorage.s3.endpoint", "http://minio:9000/bucket"), "endpoint"},
		{"s3 typo", s3Values("blobStorage.s3.pathstyle", true), "pathstyle"},
		{"client auth without TLS", Values("tls.clientAuth", "require"), "tls.enabled"},
		{"unknown client auth", Values("tls.enabled", true, "tls.secretName", "t", "tls.clientAuth", "optional"), "clientAuth"},
		{"tokens without executor token", Values("apiTokens.secretName", "tokens"), "apiTokenSecret"},
		{"bad secret name", Values("clusterSecret.secretName", "Not_A_Name"), "secretName"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render succeeded or failed for another reason: %v (want %q)", err, c.want)
			}
		})
	}
}
