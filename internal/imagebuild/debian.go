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

package imagebuild

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Files of the host's installed Debian packages, for an image whose program
// needs more than a static binary: e.g. csi-fence-attacher with a ClusterLabs
// fence agent (Python, its libraries, ipmitool), which power fencing runs as
// its child. No registry and no container engine is needed: the files are
// the host's, as dpkg installed them, so the image runs what the host's
// tests run.
//
// The packages' closure is taken from dpkg's database (status: Depends and
// Pre-Depends, the first installed alternative, virtual packages through
// Provides), their files from dpkg's file lists (what `dpkg -L` prints).
// Paths keep the host's layout: a symbolic link on the way (the merged /usr
// of bookworm: /lib -> usr/lib, /bin -> usr/bin) goes into the image as a
// link, with what it points to, so that a file dpkg lists as
// /lib/x86_64-linux-gnu/libc.so.6 is found at both names, as on the host.
// dpkg's diversions are not applied: the file at the listed path is taken.

// DebianOptions say which of the host's installed Debian packages go into
// an image (DebianFiles).
type DebianOptions struct {
	// Root is the host's root directory, "/" when empty; its dpkg database
	// is <Root>/var/lib/dpkg and every path is read under it.
	Root string
	// Packages are installed packages whose files go in, with those of
	// every package they depend on.
	Packages []string
	// Paths are further files or directories of the host (absolute, every
	// file below a directory too): e.g. one program of a package whose other
	// programs' dependencies are not wanted. Their dependencies must be in
	// Packages.
	Paths []string
	// Skip are packages not followed as dependencies, nor their own
	// dependencies: what a package needs to be installed or configured,
	// not to run (dpkg, init-system-helpers).
	Skip []string
	// Exclude are path prefixes of packages' files left out (their
	// documentation); a file a kept link points to is kept.
	Exclude []string
}

// DebianContent is what DebianFiles found.
type DebianContent struct {
	Files []File
	// Packages are the packages whose files went in, "name=version",
	// sorted.
	Packages []string
}

// DebianFiles returns the files of the packages opts names and of their
// dependencies, and opts.Paths, as the host has them.
func DebianFiles(opts DebianOptions) (*DebianContent, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	db, err := readDpkgStatus(filepath.Join(root, "var", "lib", "dpkg", "status"))
	if err != nil {
		return nil, err
	}
	pkgs, err := db.closure(opts.Packages, opts.Skip)
	if err != nil {
		return nil, err
	}
	c := &collector{root: root, entries: map[string]File{}, dirs: map[string]string{}}
	out := &DebianContent{}
	for _, p := range pkgs {
		out.Packages = append(out.Packages, p.name+"="+p.version)
		list, err := p.files(root)
		if err != nil {
			return nil, err
		}
		for _, f := range list {
			if f == "/." || excluded(f, opts.Exclude) {
				continue
			}
			// A listed file that is not there was removed on purpose
			// (dpkg's path-exclude, as slim images drop documentation).
			if err := c.add(f, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("package %s: %w", p.name, err)
			}
		}
	}
	for _, p := range opts.Paths {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("path %q: want an absolute path", p)
		}
		err := filepath.WalkDir(filepath.Join(root, p), func(hp string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, hp)
			if err != nil {
				return err
			}
			return c.add("/"+filepath.ToSlash(rel), 0)
		})
		if err != nil {
			return nil, fmt.Errorf("path %s: %w", p, err)
		}
	}
	for _, f := range c.entries {
		out.Files = append(out.Files, f)
	}
	slices.SortFunc(out.Files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(out.Packages)
	return out, nil
}

func excluded(p string, prefixes []string) bool {
	for _, e := range prefixes {
		e = strings.TrimSuffix(e, "/")
		if p == e || strings.HasPrefix(p, e+"/") {
			return true
		}
	}
	return false
}

// ---- dpkg's database ----

type dpkgPackage struct {
	name, arch, version string
	depends             string // Pre-Depends, then Depends
}

// files reads the package's file list (dpkg -L).
func (p *dpkgPackage) files(root string) ([]string, error) {
	info := filepath.Join(root, "var", "lib", "dpkg", "info")
	var errs []error
	// Multi-Arch: same packages name theirs with the architecture.
	for _, name := range []string{p.name + ".list", p.name + ":" + p.arch + ".list"} {
		b, err := os.ReadFile(filepath.Join(info, name))
		if err == nil {
			return strings.Fields(string(b)), nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("the file list of package %s: %w", p.name, errors.Join(errs...))
}

type dpkgDB struct {
	installed map[string]*dpkgPackage
	// providers maps a virtual package to the installed packages that
	// provide it, in the status file's order.
	providers map[string][]*dpkgPackage
}

// readDpkgStatus reads dpkg's status file: every installed package.
func readDpkgStatus(file string) (*dpkgDB, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading dpkg's database (is this a Debian host?): %w", err)
	}
	db := &dpkgDB{installed: map[string]*dpkgPackage{}, providers: map[string][]*dpkgPackage{}}
	for _, stanza := range bytes.Split(b, []byte("\n\n")) {
		f := parseStanza(stanza)
		if f["Package"] == "" || !strings.HasSuffix(f["Status"], " installed") {
			continue
		}
		p := &dpkgPackage{name: f["Package"], arch: f["Architecture"], version: f["Version"],
			depends: strings.Trim(f["Pre-Depends"]+", "+f["Depends"], ", ")}
		db.installed[p.name] = p
		for _, alt := range parseDepends(f["Provides"]) {
			for _, v := range alt {
				db.providers[v] = append(db.providers[v], p)
			}
		}
	}
	return db, nil
}

// parseStanza reads one paragraph of a Debian control file: "Field: value"
// lines, a line that begins with a space continuing the field before.
func parseStanza(b []byte) map[string]string {
	f := map[string]string{}
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
			if last != "" {
				f[last] += "\n" + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = k
		f[k] = strings.TrimSpace(v)
	}
	return f
}

// parseDepends splits a relationship field (Depends, Provides) into its
// clauses, each a list of alternatives, the package names only: without
// version constraints, architecture restrictions or :any/:native
// qualifiers.
func parseDepends(s string) [][]string {
	var out [][]string
	for _, clause := range strings.Split(s, ",") {
		var alts []string
		for _, alt := range strings.Split(clause, "|") {
			alt = strings.TrimSpace(alt)
			if i := strings.IndexAny(alt, " ([<"); i >= 0 {
				alt = alt[:i]
			}
			alt, _, _ = strings.Cut(alt, ":")
			if alt != "" {
				alts = append(alts, alt)
			}
		}
		if len(alts) > 0 {
			out = append(out, alts)
		}
	}
	return out
}

// resolve returns the installed package that satisfies name: the package
// itself, or the first installed one that provides it.
func (db *dpkgDB) resolve(name string) *dpkgPackage {
	if p := db.installed[name]; p != nil {
		return p
	}
	if ps := db.providers[name]; len(ps) > 0 {
		return ps[0]
	}
	return nil
}

// closure returns the named packages and every package they depend on,
// transitively, except skip's, in the order they were reached.
func (db *dpkgDB) closure(names, skip []string) ([]*dpkgPackage, error) {
	seen := map[string]bool{}
	var out []*dpkgPackage
	queue := slices.Clone(names)
	why := map[string]string{}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		p := db.resolve(name)
		if p == nil {
			if w := why[name]; w != "" {
				return nil, fmt.Errorf("package %s, a dependency of %s, is not installed", name, w)
			}
			return nil, fmt.Errorf("package %s is not installed", name)
		}
		if seen[p.name] {
			continue
		}
		seen[p.name] = true
		out = append(out, p)
		for _, alts := range parseDepends(p.depends) {
			chosen := ""
			for _, a := range alts {
				if db.resolve(a) != nil {
					chosen = a
					break
				}
			}
			if chosen == "" {
				return nil, fmt.Errorf("package %s depends on %s, none of which is installed", p.name, strings.Join(alts, " | "))
			}
			if slices.Contains(skip, chosen) || slices.Contains(skip, db.resolve(chosen).name) {
				continue
			}
			if _, ok := why[chosen]; !ok {
				why[chosen] = p.name
			}
			queue = append(queue, chosen)
		}
	}
	return out, nil
}

// ---- the host's files, as an image's ----

// collector gathers files of the host under root as image entries (names
// relative to the image's root).
type collector struct {
	root    string
	entries map[string]File
	// dirs maps a directory's path to its path with every link followed.
	dirs map[string]string
}

// maxLinks bounds the symbolic links followed for one path (as the
// kernel's ELOOP does).
const maxLinks = 40

// add puts the file at p (absolute, under root) into the image, with its
// parent directories and every symbolic link on the way; a link at p itself
// goes in as a link, with what it points to.
func (c *collector) add(p string, depth int) error {
	if depth > maxLinks {
		return fmt.Errorf("%s: too many levels of symbolic links", p)
	}
	p = path.Clean(p)
	if p == "/" {
		return nil
	}
	dir, err := c.resolveDir(path.Dir(p), depth)
	if err != nil {
		return err
	}
	name := path.Join(dir, path.Base(p))
	if _, ok := c.entries[name[1:]]; ok {
		return nil
	}
	fi, err := os.Lstat(c.host(name))
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(c.host(name))
		if err != nil {
			return err
		}
		c.entries[name[1:]] = File{Name: name[1:], Mode: 0o777, Link: target}
		if !path.IsAbs(target) {
			target = path.Join(dir, target)
		}
		// A dangling link stays as it is on the host.
		if err := c.add(target, depth+1); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	case fi.IsDir():
		c.entries[name[1:]] = File{Name: name[1:], Mode: fileMode(fi), Dir: true}
	case fi.Mode().IsRegular():
		data, err := os.ReadFile(c.host(name))
		if err != nil {
			return err
		}
		c.entries[name[1:]] = File{Name: name[1:], Mode: fileMode(fi), Data: data}
	}
	// Devices, sockets and pipes are not a package's to ship.
	return nil
}

// resolveDir returns directory d with every symbolic link in it followed,
// adding the directories and links on the way to the image.
func (c *collector) resolveDir(d string, depth int) (string, error) {
	if d == "/" {
		return "/", nil
	}
	if r, ok := c.dirs[d]; ok {
		return r, nil
	}
	if depth > maxLinks {
		return "", fmt.Errorf("%s: too many levels of symbolic links", d)
	}
	parent, err := c.resolveDir(path.Dir(d), depth)
	if err != nil {
		return "", err
	}
	name := path.Join(parent, path.Base(d))
	fi, err := os.Lstat(c.host(name))
	if err != nil {
		return "", err
	}
	var r string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(c.host(name))
		if err != nil {
			return "", err
		}
		c.entries[name[1:]] = File{Name: name[1:], Mode: 0o777, Link: target}
		if !path.IsAbs(target) {
			target = path.Join(parent, target)
		}
		if r, err = c.resolveDir(path.Clean(target), depth+1); err != nil {
			return "", err
		}
	case fi.IsDir():
		c.entries[name[1:]] = File{Name: name[1:], Mode: fileMode(fi), Dir: true}
		r = name
	default:
		return "", fmt.Errorf("%s: not a directory", name)
	}
	c.dirs[d] = r
	return r, nil
}

func (c *collector) host(p string) string { return filepath.Join(c.root, filepath.FromSlash(p)) }

// fileMode is fi's permission bits with setuid, setgid and sticky, as tar
// writes them.
func fileMode(fi fs.FileInfo) int64 {
	m := int64(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}
