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

// Command csi-fence-prestop-webhook is the mutating admission webhook that
// delivers termination reasons to the preStop hooks of the pods that opt in
// (pkg/prestop): it rewrites their hooks to run through the
// csi-fence-prestop helper, which an init container copies into the pod.
//
// It is a command of its own, not a role of csi-fence-attacher: the
// attacher runs once per CSI driver, beside the driver's controller, while
// the webhook serves the whole cluster whatever the storage, needs no CSI
// socket nor leader election, and is deployed (and scaled, and upgraded)
// with the helper image it injects.
//
// TLS: --tls-cert-file/--tls-private-key-file (cert-manager's Secret,
// reloaded on rotation), or --generate-certificate, which makes a CA and a
// serving certificate for --certificate-hosts at start and writes the CA
// into --webhook-configuration's caBundle, and keeps it there.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/prestop"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	klog.InitFlags(nil)
	listen := flag.String("listen", ":8443", "address of the HTTPS server (/mutate, /healthz)")
	certFile := flag.String("tls-cert-file", "", "serving certificate (PEM), reloaded when it changes")
	keyFile := flag.String("tls-private-key-file", "", "its private key")
	generate := flag.Bool("generate-certificate", false, "generate a CA and serving certificate at start (instead of --tls-cert-file) and write the CA into --webhook-configuration")
	hosts := flag.String("certificate-hosts", "", "comma-separated DNS names and IPs of the generated certificate, e.g. csi-fence-prestop-webhook.kube-system.svc")
	webhookConfig := flag.String("webhook-configuration", "csi-fence-prestop", "MutatingWebhookConfiguration whose caBundle --generate-certificate keeps")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	image := flag.String("helper-image", "", "image of csi-fence-prestop, copied into each mutated pod by an init container")
	helperTimeout := flag.Duration("helper-timeout", 0, "bound of the helper's API reads (0: its default, 2s)")
	nodeAgentURL := flag.String("node-agent-url", "", "URL of the node agents' "+termreason.ServedPath+" behind a Service with internalTrafficPolicy Local, which the helper asks when its pod was force-deleted while its node was away (empty: it does not ask, and such hooks get Unknown)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("csi-fence-prestop-webhook", version.String())
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if err := run(ctx, *listen, *certFile, *keyFile, *generate, *hosts, *webhookConfig, *kubeconfig, *image, *helperTimeout, *nodeAgentURL); err != nil {
		klog.ErrorS(err, "csi-fence-prestop-webhook failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

func run(ctx context.Context, listen, certFile, keyFile string, generate bool, hosts, webhookConfig, kubeconfig, image string, helperTimeout time.Duration, nodeAgentURL string) error {
	logger := klog.FromContext(ctx)
	if image == "" {
		return errors.New("--helper-image is required")
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case generate && certFile != "":
		return errors.New("--generate-certificate and --tls-cert-file exclude each other")
	case generate:
		if hosts == "" {
			return errors.New("--generate-certificate needs --certificate-hosts")
		}
		caPEM, cert, err := prestop.GenerateCertificate(strings.Split(hosts, ","), 10*365*24*time.Hour)
		if err != nil {
			return err
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
		cfg, err := restConfig(kubeconfig)
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		go keepCABundle(ctx, client, webhookConfig, caPEM)
	case certFile != "" && keyFile != "":
		f := &prestop.FileCertificate{CertFile: certFile, KeyFile: keyFile}
		if _, err := f.Get(nil); err != nil {
			return err
		}
		tlsCfg.GetCertificate = f.Get
	default:
		return errors.New("either --tls-cert-file and --tls-private-key-file, or --generate-certificate")
	}
	if nodeAgentURL != "" {
		if u, err := url.Parse(nodeAgentURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--node-agent-url %q: an http(s) URL is required", nodeAgentURL)
		}
	}
	opts := prestop.MutateOptions{Image: image, NodeAgentURL: nodeAgentURL}
	if helperTimeout > 0 {
		opts.Timeout = helperTimeout.String()
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", prestop.Handler(opts))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: listen, Handler: mux, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	logger.Info("Serving the preStop termination reason webhook", "address", listen, "helperImage", image, "generatedCertificate", generate)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// keepCABundle writes the generated CA into the webhook configuration and
// keeps it there: the configuration may be created after the webhook
// starts, and applying the manifest again clears the caBundle.
func keepCABundle(ctx context.Context, client kubernetes.Interface, name string, caPEM []byte) {
	logger := klog.FromContext(ctx)
	delay := 200 * time.Millisecond
	for {
		if _, err := prestop.InjectCABundle(ctx, client, name, caPEM); err != nil {
			logger.Info("Cannot write the caBundle yet; retrying", "mutatingWebhookConfiguration", name, "err", err, "retryIn", delay)
			delay = min(2*delay, 30*time.Second)
		} else {
			delay = 30 * time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
