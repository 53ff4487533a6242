// Package sanitytest runs csi-test's sanity suite and the fence sanity suite
// (pkg/fencesanity) against the mock driver: a controller instance and two
// node instances on one array, in process. Its tests also prove that the
// fence suite catches the mock's broken modes (negative controls) and skips
// cleanly on a driver without the extension.
package sanitytest
