// Package nodeinteg holds the node agent's integration tests on a real
// host: the runsc driver, host cgroups, rootfs layers, network namespaces
// and the real envd. They need root, runsc ($WARREN_RUNSC), envd
// ($WARREN_ENVD) and a base root filesystem tar ($WARREN_TEST_ROOTFS_TAR);
// without them they skip locally and fail under CI=true.
package nodeinteg
