// Package helm tests the Warren Helm chart in warren/: helm lint, helm
// template with default and custom values, and, against a real
// kube-apiserver and etcd started on loopback, kubectl apply
// --dry-run=server, PodSecurity admission of the pod templates, and helm
// install and upgrade.
//
// The tools come from scripts/k8s-tools.sh, which prints the variables the
// tests read (WARREN_HELM, WARREN_KUBECTL, WARREN_KUBE_APISERVER,
// WARREN_ETCD). Without them the tests skip, and under CI=true they fail.
// There is no kubelet here: no pod runs.
package helm
