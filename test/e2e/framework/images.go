package framework

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images of the real nodes. No registry is reachable: each is built
// here from a static Go binary of test/e2e/images and imported into every
// node's containerd, which never pulls (the kubelet's sandbox image is the
// pause image, workloads use imagePullPolicy Never).
const (
	PauseImage  = "localhost/csi-fence/pause:dev"
	WriterImage = "localhost/csi-fence/writer:dev"
)

// Image is an image tarball (docker archive format, which `ctr images
// import` reads) ready to import.
type Image struct {
	Name    string
	Tarball string
}

// imageSources maps each image to the command of test/e2e/images it runs.
var imageSources = []struct{ image, cmd string }{
	{PauseImage, "pause"},
	{WriterImage, "writer"},
}

// BuildImages builds the real nodes' images into dir: the static binaries
// (go build, CGO off, so they need no libc in the image) and one image
// tarball each, whose only layer holds the binary as /<cmd>, its entrypoint.
func BuildImages(ctx context.Context, log Logger, dir string) ([]Image, error) {
	begin := time.Now()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", bin + "/"}
	for _, s := range imageSources {
		args = append(args, "./test/e2e/images/"+s.cmd)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the image binaries: %w\n%s", err, out)
	}
	var images []Image
	for _, s := range imageSources {
		path := filepath.Join(dir, s.cmd+".tar")
		if err := writeImage(path, s.image, filepath.Join(bin, s.cmd)); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.image, err)
		}
		images = append(images, Image{Name: s.image, Tarball: path})
	}
	log.Logf("images built in %.1fs: %s, %s", time.Since(begin).Seconds(), PauseImage, WriterImage)
	return images, nil
}

// writeImage writes an image tarball tagged ref whose one layer is the
// executable binary at /<base name>, also its entrypoint.
func writeImage(path, ref, binary string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	layerTar, err := singleFileTar(binary, "/"+filepath.Base(binary))
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{"/" + filepath.Base(binary)}, WorkingDir: "/"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// singleFileTar returns a tar stream holding file as name, executable, with
// the directories a container's mounts need (/tmp, /data).
func singleFileTar(file, name string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"tmp/", "data/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o1777}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name[1:], Mode: 0o755, Size: int64(len(data))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
