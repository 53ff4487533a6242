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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The webhook's certificate story: where cert-manager runs, it issues the
// serving certificate into a Secret (mounted, reloaded on rotation by
// FileCertificate) and its CA injector writes the caBundle; otherwise the
// webhook generates a CA and a serving certificate at start
// (GenerateCertificate) and writes that CA into its own
// MutatingWebhookConfiguration (InjectCABundle). A generated CA lives as
// long as the process: one replica, a new CA at each start.

// GenerateCertificate returns a new CA (PEM) and a serving certificate for
// hosts (DNS names or IP addresses) signed by it, valid for validity.
func GenerateCertificate(hosts []string, validity time.Duration) (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "csi-fence-prestop-webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), cert, nil
}

// FileCertificate serves a certificate from files that may be rotated
// (cert-manager rewrites its Secret, the kubelet the mounted files): it
// loads them again when their modification time changes.
type FileCertificate struct {
	CertFile, KeyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
}

// Get is a tls.Config GetCertificate.
func (f *FileCertificate) Get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.CertFile)
	if err != nil {
		if f.cert != nil {
			return f.cert, nil // mid-rotation: keep serving the last one
		}
		return nil, err
	}
	if f.cert == nil || !st.ModTime().Equal(f.modTime) {
		c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			if f.cert != nil {
				return f.cert, nil
			}
			return nil, err
		}
		f.cert, f.modTime = &c, st.ModTime()
	}
	return f.cert, nil
}

// InjectCABundle writes caPEM into every webhook of the named
// MutatingWebhookConfiguration whose caBundle differs, and reports whether
// it wrote.
func InjectCABundle(ctx context.Context, client kubernetes.Interface, name string, caPEM []byte) (bool, error) {
	cfgs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := cfgs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caPEM) {
			cfg.Webhooks[i].ClientConfig.CABundle = caPEM
			changed = true
		}
	}
	if !changed {
		return false, nil
	}
	// Update carries the resourceVersion read: a concurrent change (an
	// apply of the manifest) makes it fail and the caller try again.
	if _, err := cfgs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		return false, fmt.Errorf("writing the caBundle of MutatingWebhookConfiguration %s: %w", name, err)
	}
	klog.FromContext(ctx).Info("Wrote the generated CA into the webhook configuration", "mutatingWebhookConfiguration", name)
	return true, nil
}
