/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package prestop

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestGeneratedCertificateVerifiesForItsHosts(t *testing.T) {
	caPEM, cert, err := GenerateCertificate([]string{"127.0.0.1", "csi-fence-prestop-webhook.kube-system.svc"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"127.0.0.1", true}, {"csi-fence-prestop-webhook.kube-system.svc", true}, {"other.example.com", false}} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if (err == nil) != tc.ok {
			t.Errorf("verify for %s: %v, want ok=%v", tc.host, err, tc.ok)
		}
	}
}

func TestInjectCABundle(t *testing.T) {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "csi-fence-prestop"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "a.csi-fence.io"}, {Name: "b.csi-fence.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old")}}}}
	client := fake.NewClientset(cfg)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		ca        string
		wantWrote bool
	}{
		{"writes every webhook's bundle", "new", true},
		{"then has nothing to do", "new", false},
		{"a new CA (restart) is written again", "newer", true},
	} {
		wrote, err := InjectCABundle(ctx, client, "csi-fence-prestop", []byte(tc.ca))
		if err != nil || wrote != tc.wantWrote {
			t.Fatalf("%s: wrote %v, %v", tc.name, wrote, err)
		}
		got, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "csi-fence-prestop", metav1.GetOptions{})
		for _, w := range got.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, []byte(tc.ca)) {
				t.Fatalf("%s: webhook %s has caBundle %q", tc.name, w.Name, w.ClientConfig.CABundle)
			}
		}
	}
	if _, err := InjectCABundle(ctx, client, "missing", []byte("x")); err == nil {
		t.Fatal("no error for a missing configuration")
	}
}

// A rotated certificate (cert-manager renewed its Secret) is served from
// the next handshake on; a half-written one never replaces a good one.
func TestFileCertificateReloads(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := dir+"/tls.crt", dir+"/tls.key"
	write := func(host string, mtime time.Time) []byte {
		_, cert, err := GenerateCertificate([]string{host}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
			t.Fatal(err)
		}
		// An explicit modification time: the reload must not depend on
		// the file system's timestamp resolution.
		if err := os.Chtimes(certFile, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return cert.Certificate[0]
	}
	f := &FileCertificate{CertFile: certFile, KeyFile: keyFile}
	base := time.Now().Add(-time.Hour)
	for i, step := range []struct {
		name    string
		prepare func() []byte // returns the certificate expected next
	}{
		{"first load", func() []byte { return write("a.example", base) }},
		{"rotated", func() []byte { return write("b.example", base.Add(time.Minute)) }},
		{"a broken file keeps the last good one", func() []byte {
			good, _ := f.Get(nil)
			if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			_ = os.Chtimes(certFile, base.Add(2*time.Minute), base.Add(2*time.Minute))
			return good.Certificate[0]
		}},
	} {
		want := step.prepare()
		got, err := f.Get(nil)
		if err != nil || !bytes.Equal(got.Certificate[0], want) {
			t.Fatalf("step %d (%s): got another certificate (err %v)", i, step.name, err)
		}
	}
}
