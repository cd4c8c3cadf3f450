package blob

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/indexify-go/indexify/test/harness"
)

// startTestS3 runs a real S3 server (versitygw) on loopback for the test.
func startTestS3(t *testing.T) *harness.S3Server {
	t.Helper()
	return harness.StartS3(t)
}

var bucketSeq atomic.Int64

// newBucketName returns a bucket name unique within the test binary.
func newBucketName(t *testing.T) string {
	name := strings.ToLower(t.Name())
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[len(s)-40:]
	}
	return fmt.Sprintf("t%d-%s", bucketSeq.Add(1), s)
}

// testCreds puts the test server's keys into the environment, where the
// store's credential chain looks first, and keeps the machine's own AWS
// files out of the way.
func testCreds(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", harness.S3AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", harness.S3SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	noCredFiles(t)
}

func noCredFiles(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/none")
	t.Setenv("AWS_CONFIG_FILE", dir+"/none")
	t.Setenv("HOME", dir)
}

// newTestS3 opens a store on a fresh bucket of srv. Unset fields of cfg get
// test defaults: the endpoint, path style, bucket creation and the
// smallest part size (so multipart paths run with little data).
func newTestS3(t *testing.T, srv *harness.S3Server, cfg S3Config) *S3 {
	t.Helper()
	testCreds(t)
	if cfg.Bucket == "" {
		cfg.Bucket = newBucketName(t)
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = srv.Endpoint()
	}
	cfg.PathStyle = true
	cfg.CreateBucket = true
	if cfg.PartSize == 0 {
		cfg.PartSize = MinS3PartSize
	}
	s, err := NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return s
}

// s3Stored lists every object and incomplete multipart upload in the
// store's bucket.
func s3Stored(t *testing.T, s *S3) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list objects: %v", o.Err)
		}
		out = append(out, o.Key)
	}
	for u := range s.client.ListIncompleteUploads(ctx, s.bucket, "", true) {
		if u.Err != nil {
			t.Fatalf("list uploads: %v", u.Err)
		}
		out = append(out, "incomplete-upload:"+u.Key)
	}
	return out
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
