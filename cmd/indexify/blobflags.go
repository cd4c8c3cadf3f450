package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/indexify-go/indexify/internal/blob"
)

// blobFlags select and configure the blob store of an API server (`server`
// and `dev`). Like every flag they can come from the config file with the
// flag name as a flat key; the nested shape of the original configuration
//
//	blob_storage:
//	  s3: {bucket: b, region: r, endpoint: e}    |    disk: {path: p}
//
// is written here as
//
//	blob_store: s3                                 blob_store: disk
//	s3_bucket: b                                   blob_dir: p
//	s3_region: r
//	s3_endpoint: e
//
// Credentials are never flags: they come from AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY (a Kubernetes Secret mapped to env), an AWS
// shared-credentials file (--s3-credentials-file), or IAM (--s3-iam).
type blobFlags struct {
	store string
	s3    blob.S3Config
}

func (f *blobFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.store, "blob-store", "disk", "where content bytes live: disk (--blob-dir) or s3 (--s3-*)")
	fs.StringVar(&f.s3.Bucket, "s3-bucket", "", "S3 bucket for content blobs (--blob-store s3)")
	fs.StringVar(&f.s3.Region, "s3-region", blob.DefaultS3Region, "region of the S3 bucket")
	fs.StringVar(&f.s3.Endpoint, "s3-endpoint", "", "S3 endpoint: host[:port] (https) or http(s)://host[:port]; empty = AWS S3")
	fs.BoolVar(&f.s3.PathStyle, "s3-path-style", false, "address buckets as endpoint/bucket (MinIO, SeaweedFS, Ceph, IP endpoints)")
	fs.StringVar(&f.s3.Prefix, "s3-prefix", "", `prefix of every object name, ending in "/" (lets deployments share a bucket)`)
	fs.StringVar(&f.s3.CAFile, "s3-ca-file", "", "PEM file of CA certificates to trust for the S3 endpoint, in addition to the system's")
	fs.StringVar(&f.s3.CredentialsFile, "s3-credentials-file", "", "AWS shared-credentials file (profile from AWS_PROFILE); default ~/.aws/credentials; the environment wins")
	fs.BoolVar(&f.s3.UseIAM, "s3-iam", false, "fall back to IAM credentials (EC2/ECS instance role, EKS web identity)")
	fs.BoolVar(&f.s3.CreateBucket, "s3-create-bucket", false, "create the bucket at startup if it does not exist")
	fs.Int64Var(&f.s3.PartSize, "s3-part-size", blob.DefaultS3PartSize, "multipart upload part size in bytes: the memory one upload buffers (min 5 MiB)")
	fs.DurationVar(&f.s3.Timeout, "s3-timeout", blob.DefaultS3Timeout, "S3 connect/response timeout, also the budget of one small operation")
	fs.IntVar(&f.s3.MaxRetries, "s3-max-attempts", blob.DefaultS3MaxRetries, "attempts per S3 request (retries with exponential backoff; 1 = no retry)")
}

// open builds the selected store; the disk store lives in blobDir, else in
// <dataDir>/blobs. An S3 service that is unreachable at startup does not stop the server:
// it answers 503 for content until the service is back.
func (f *blobFlags) open(blobDir, dataDir string, log *slog.Logger) (blob.Store, error) {
	switch f.store {
	case "disk":
		if f.s3.Bucket != "" {
			return nil, fmt.Errorf("--s3-bucket is set but --blob-store is disk; add --blob-store s3")
		}
		dir, err := blobDiskDir(blobDir, dataDir)
		if err != nil {
			return nil, err
		}
		d, err := blob.NewDisk(dir)
		if err != nil {
			return nil, err
		}
		return d, nil
	case "s3":
		if f.s3.Bucket == "" {
			return nil, fmt.Errorf("--blob-store s3 needs --s3-bucket")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*f.s3.Timeout)
		defer cancel()
		s, err := blob.NewS3(ctx, f.s3)
		if errors.Is(err, blob.ErrUnavailable) && s != nil {
			log.Warn("S3 is unreachable at startup; content requests fail with 503 until it answers", "bucket", f.s3.Bucket, "err", err)
			return s, nil
		}
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("--blob-store %q: want disk or s3", f.store)
}

// blobDiskDir is the disk store's directory: --blob-dir, else
// <data-dir>/blobs.
func blobDiskDir(blobDir, dataDir string) (string, error) {
	if blobDir != "" {
		return blobDir, nil
	}
	if dataDir == "" {
		return "", fmt.Errorf("--blob-dir or --data-dir is required")
	}
	return filepath.Join(dataDir, "blobs"), nil
}
