package framework

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildImages reads each built tarball back as an image: tagged with its
// name, its entrypoint the binary, and that binary in its one layer,
// executable; the product's images too, the webhook's and the helper's in
// the release layout (/entrypoint, a non-root user), which the webhook's
// Deployment and the init container it injects need.
func TestBuildImages(t *testing.T) {
	images, err := BuildImages(context.Background(), t, t.TempDir(), ImageOptions{Product: true})
	if err != nil {
		t.Fatal(err)
	}
	type layout struct{ entrypoint, user string }
	own := func(cmd string) layout { return layout{"/" + cmd, ""} }
	release := layout{"/entrypoint", "65532:65532"}
	want := map[string]layout{PauseImage: own("pause"), WriterImage: own("writer"),
		AttacherImage: own("csi-fence-attacher"), MockImage: own("csi-fence-mock"),
		WebhookImage: release, HelperImage: release}
	if len(images) != len(want) {
		t.Fatalf("got %d images, want %d", len(images), len(want))
	}
	for _, im := range images {
		l, ok := want[im.Name]
		if !ok {
			t.Fatalf("unexpected image %s", im.Name)
		}
		cmd := l.entrypoint[1:]
		tag, err := name.NewTag(im.Name)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(im.Tarball, &tag)
		if err != nil {
			t.Fatalf("%s: %v", im.Name, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != l.entrypoint {
			t.Errorf("%s: entrypoint %q, want [%s]", im.Name, got, l.entrypoint)
		}
		if cfg.Config.User != l.user {
			t.Errorf("%s: user %q, want %q", im.Name, cfg.Config.User, l.user)
		}
		if cfg.OS != "linux" {
			t.Errorf("%s: os %q", im.Name, cfg.OS)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", im.Name, len(layers), err)
		}
		hdr, err := findInLayer(layers[0].Uncompressed, cmd)
		if err != nil {
			t.Fatalf("%s: %v", im.Name, err)
		}
		if hdr.Mode&0o111 == 0 || hdr.Size == 0 {
			t.Errorf("%s: /%s mode %o size %d, want an executable", im.Name, cmd, hdr.Mode, hdr.Size)
		}
	}
}

func findInLayer(open func() (io.ReadCloser, error), file string) (*tar.Header, error) {
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New(file + " not in the layer")
		}
		if err != nil {
			return nil, err
		}
		if hdr.Name == file {
			return hdr, nil
		}
	}
}
