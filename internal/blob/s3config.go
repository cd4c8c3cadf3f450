package blob

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3 defaults. The part size bounds the memory of one streaming upload and,
// with S3's limit of 10,000 parts, the largest blob: 16 MiB parts allow
// 156 GiB, far above the API's default upload limit of 1 GiB.
const (
	DefaultS3PartSize   = 16 << 20
	MinS3PartSize       = 5 << 20 // S3's smallest part (except the last)
	DefaultS3Timeout    = 30 * time.Second
	DefaultS3MaxRetries = 4
	DefaultS3Region     = "us-east-1"
)

// S3Config configures an S3 store.
type S3Config struct {
	Bucket string
	// Region of the bucket; S3-compatible servers mostly ignore it.
	Region string
	// Endpoint is "host[:port]" (HTTPS) or a URL "http(s)://host[:port]";
	// empty means AWS S3 (s3.amazonaws.com).
	Endpoint string
	// PathStyle addresses the bucket as endpoint/bucket rather than as
	// bucket.endpoint; MinIO, SeaweedFS, Ceph and IP endpoints need it.
	PathStyle bool
	// Prefix is prepended to every object name ("indexify/" or ""), so
	// one bucket can serve several deployments.
	Prefix string
	// CAFile is a PEM bundle trusted in addition to the system roots, for
	// servers with a private CA.
	CAFile string
	// CredentialsFile is an AWS shared-credentials (INI) file; the profile
	// is AWS_PROFILE or "default". Empty: ~/.aws/credentials and
	// ~/.aws/config, as the AWS tools read them.
	CredentialsFile string
	// UseIAM lets credentials come from the EC2/ECS instance role or an
	// EKS service-account web identity when neither the environment nor a
	// file has them. Off by default: it makes network calls to metadata
	// services that only exist on those platforms.
	UseIAM bool
	// CreateBucket creates the bucket at startup if it is missing
	// (convenient for `indexify dev` against a local server).
	CreateBucket bool
	// PartSize of multipart uploads (bytes); 0 = DefaultS3PartSize.
	PartSize int64
	// Timeout bounds connecting, waiting for a response to start, and
	// each small operation (retries included); 0 = DefaultS3Timeout.
	Timeout time.Duration
	// MaxRetries is the attempts per request (1 = no retry) made by the
	// client library with exponential backoff and jitter (200 ms doubling,
	// capped at 1 s); 0 = DefaultS3MaxRetries. Requests are retried only
	// when safe: bodiless ones (GET, HEAD, DELETE) and parts whose bytes
	// are in memory.
	MaxRetries int
}

// NewS3 connects an S3 store. It checks the bucket once (creating it if
// asked): a missing bucket or bad credentials fail here, clearly, instead of
// on the first upload. If the service cannot be reached the store is still
// returned, with an error matching ErrUnavailable, so a caller may start
// anyway and serve 503s until the service is back.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("blob: s3 bucket %q: %v", cfg.Bucket, err)
	}
	if cfg.Prefix != "" {
		if !strings.HasSuffix(cfg.Prefix, "/") || ValidateKey(strings.TrimSuffix(cfg.Prefix, "/")) != nil {
			return nil, fmt.Errorf("blob: s3 prefix %q: want segments ending in \"/\", e.g. \"indexify/\"", cfg.Prefix)
		}
	}
	if cfg.Region == "" {
		cfg.Region = DefaultS3Region
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultS3PartSize
	}
	if cfg.PartSize < MinS3PartSize {
		return nil, fmt.Errorf("blob: s3 part size %d is below S3's minimum of %d bytes", cfg.PartSize, MinS3PartSize)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultS3Timeout
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = DefaultS3MaxRetries
	}
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	transport, err := s3Transport(cfg, secure)
	if err != nil {
		return nil, err
	}
	creds, err := s3Credentials(cfg, transport)
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Transport:    transport,
		Region:       cfg.Region,
		BucketLookup: lookup,
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("blob: s3 client: %w", err)
	}
	s := &S3{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix, partSize: uint64(cfg.PartSize), opTimeout: cfg.Timeout}
	return s, s.checkBucket(ctx, cfg.CreateBucket, cfg.Region)
}

func (s *S3) checkBucket(ctx context.Context, create bool, region string) error {
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	ok, err := s.client.BucketExists(opCtx, s.bucket)
	if err != nil {
		return s.classify(ctx, "check bucket", s.bucket, err)
	}
	if ok {
		return nil
	}
	if !create {
		return fmt.Errorf("blob: s3 bucket %q does not exist (create it, or pass --s3-create-bucket)", s.bucket)
	}
	err = s.client.MakeBucket(opCtx, s.bucket, minio.MakeBucketOptions{Region: region})
	var er minio.ErrorResponse
	if errors.As(err, &er) && (er.Code == "BucketAlreadyOwnedByYou" || er.Code == "BucketAlreadyExists") {
		return nil // another server created it meanwhile
	}
	if err != nil {
		return s.classify(ctx, "create bucket", s.bucket, err)
	}
	return nil
}

// parseEndpoint accepts "host:port" (HTTPS) or an http/https URL.
func parseEndpoint(ep string) (host string, secure bool, err error) {
	if ep == "" {
		return "s3.amazonaws.com", true, nil
	}
	if !strings.Contains(ep, "://") {
		if strings.ContainsAny(ep, "/?#") {
			return "", false, fmt.Errorf("blob: s3 endpoint %q: want host[:port] or http(s)://host[:port]", ep)
		}
		return ep, true, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("blob: s3 endpoint %q: %v", ep, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("blob: s3 endpoint %q: want host[:port] or http(s)://host[:port] without a path", ep)
	}
	return u.Host, u.Scheme == "https", nil
}

// s3Transport is an HTTP transport with bounded connect and response-start
// times (so an unreachable or hung service fails, and is retried, instead
// of blocking an upload forever) and the optional private CA.
func s3Transport(cfg S3Config, secure bool) (*http.Transport, error) {
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   min(cfg.Timeout, 10*time.Second),
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   64,
		// Objects are stored as given; transparent gzip would only cost CPU
		// and confuse sizes.
		DisableCompression: true,
	}
	if cfg.CAFile != "" {
		if !secure {
			return nil, fmt.Errorf("blob: --s3-ca-file is set but the endpoint %q is plain http", cfg.Endpoint)
		}
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("blob: s3 CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("blob: s3 CA file %s holds no PEM certificate", cfg.CAFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return t, nil
}

// s3Credentials resolves credentials in the usual order: environment
// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN]), then the
// shared-credentials file, then (only if enabled) IAM roles. Having none is
// an error at startup rather than anonymous requests failing later.
func s3Credentials(cfg S3Config, t *http.Transport) (*credentials.Credentials, error) {
	providers := []credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{Filename: cfg.CredentialsFile},
	}
	if cfg.UseIAM {
		providers = append(providers, &credentials.IAM{Client: &http.Client{Transport: t, Timeout: cfg.Timeout}})
	}
	if cfg.CredentialsFile != "" {
		if _, err := os.Stat(cfg.CredentialsFile); err != nil {
			return nil, fmt.Errorf("blob: s3 credentials file: %w", err)
		}
	}
	creds := credentials.NewChainCredentials(providers)
	v, err := creds.GetWithContext(&credentials.CredContext{Client: &http.Client{Transport: t, Timeout: cfg.Timeout}})
	if err != nil {
		return nil, fmt.Errorf("blob: s3 credentials: %w", err)
	}
	if v.AccessKeyID == "" || v.SecretAccessKey == "" {
		where := "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, --s3-credentials-file"
		if !cfg.UseIAM {
			where += " or --s3-iam"
		}
		return nil, fmt.Errorf("blob: no S3 credentials found (set %s)", where)
	}
	return creds, nil
}
