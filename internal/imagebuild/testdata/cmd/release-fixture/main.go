// Command release-fixture is what TestRelease builds an image of: the
// smallest command that says the version Release stamps into pkg/version.
// Cross-compiling the product's commands for arm64 would compile their whole
// dependency tree (client-go, gRPC, ...) a second time for one unit test;
// `make images` does that for a release.
package main

import (
	"flag"
	"fmt"

	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version())
	}
}
