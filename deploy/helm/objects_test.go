package helm

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// object is the part of a rendered Kubernetes object that the tests read.
type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	Spec       objectSpec        `yaml:"spec"`
	// AutomountServiceAccountToken is a ServiceAccount's.
	AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
	// raw is the whole object, for the tests that make a Pod of a template.
	raw map[string]any
}

type meta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type objectSpec struct {
	Replicas *int `yaml:"replicas"`
	// Selector is a Service's label map or a workload's {matchLabels: ...}.
	Selector             map[string]any `yaml:"selector"`
	Template             podTemplate    `yaml:"template"`
	Type                 string         `yaml:"type"`
	Ports                []servicePort  `yaml:"ports"`
	VolumeClaimTemplates []any          `yaml:"volumeClaimTemplates"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"`
	NodePort   int    `yaml:"nodePort"`
}

type podTemplate struct {
	Metadata meta    `yaml:"metadata"`
	Spec     podSpec `yaml:"spec"`
}

type podSpec struct {
	ServiceAccountName           string            `yaml:"serviceAccountName"`
	AutomountServiceAccountToken *bool             `yaml:"automountServiceAccountToken"`
	HostNetwork                  bool              `yaml:"hostNetwork"`
	HostPID                      bool              `yaml:"hostPID"`
	DNSPolicy                    string            `yaml:"dnsPolicy"`
	NodeSelector                 map[string]string `yaml:"nodeSelector"`
	Containers                   []container       `yaml:"containers"`
	Volumes                      []volume          `yaml:"volumes"`
}

type container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	Command         []string        `yaml:"command"`
	Args            []string        `yaml:"args"`
	Env             []envVar        `yaml:"env"`
	Ports           []containerPort `yaml:"ports"`
	LivenessProbe   *probe          `yaml:"livenessProbe"`
	ReadinessProbe  *probe          `yaml:"readinessProbe"`
	Resources       map[string]any  `yaml:"resources"`
	SecurityContext map[string]any  `yaml:"securityContext"`
	VolumeMounts    []volumeMount   `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type probe struct {
	HTTPGet *struct {
		Path   string `yaml:"path"`
		Port   any    `yaml:"port"`
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

type volumeMount struct {
	Name             string `yaml:"name"`
	MountPath        string `yaml:"mountPath"`
	MountPropagation string `yaml:"mountPropagation"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
	EmptyDir any `yaml:"emptyDir"`
	Secret   *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
}

// rendered is the output of helm template, split into objects.
type rendered struct {
	yaml    string
	objects []object
}

// render runs helm template on the chart as release "warren" in namespace
// ns with the given extra arguments (--set, --values).
func render(t *testing.T, ns string, args ...string) rendered {
	t.Helper()
	out, err := helm(t, append([]string{"template", "warren", chartDir, "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseObjects(out)
	if err != nil {
		t.Fatalf("parse helm template output: %v\n%s", err, out)
	}
	return rendered{yaml: out, objects: objs}
}

func parseObjects(s string) ([]object, error) {
	var objs []object
	dec := yaml.NewDecoder(strings.NewReader(s))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var o object
		if err := node.Decode(&o); err != nil {
			return nil, err
		}
		if o.Kind == "" { // an empty document
			continue
		}
		if err := node.Decode(&o.raw); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
}

// get is the object of that kind and name; the test fails without one.
func (r rendered) get(t *testing.T, kind, name string) object {
	t.Helper()
	for _, o := range r.objects {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %q rendered; have %v", kind, name, r.names())
	return object{}
}

func (r rendered) has(kind, name string) bool {
	for _, o := range r.objects {
		if o.Kind == kind && o.Metadata.Name == name {
			return true
		}
	}
	return false
}

func (r rendered) names() []string {
	var names []string
	for _, o := range r.objects {
		names = append(names, o.Kind+"/"+o.Metadata.Name)
	}
	return names
}

// secretValue is the decoded value of a Secret's key.
func (o object) secretValue(t *testing.T, key string) string {
	t.Helper()
	v, ok := o.Data[key]
	if !ok {
		t.Fatalf("Secret %s has no key %q (keys %v)", o.Metadata.Name, key, keys(o.Data))
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		t.Fatalf("Secret %s key %s: %v", o.Metadata.Name, key, err)
	}
	return string(b)
}

// container is the pod template's only container, which must have that name.
func (o object) container(t *testing.T, name string) container {
	t.Helper()
	cs := o.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != name {
		t.Fatalf("%s %s: containers %+v, want one named %q", o.Kind, o.Metadata.Name, cs, name)
	}
	return cs[0]
}

// env is how the container's variable is set: "secret NAME/KEY",
// "field PATH" or "value V".
func (c container) env(name string) string {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			return "secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			return "field " + e.ValueFrom.FieldRef.FieldPath
		default:
			return "value " + e.Value
		}
	}
	return ""
}

// mount describes the volume at path: "hostPath PATH (TYPE), propagation P".
func (o object) mount(path string) string {
	spec := o.Spec.Template.Spec
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			src := "emptyDir"
			if v.Secret != nil {
				src = "secret " + v.Secret.SecretName
			}
			if v.HostPath != nil {
				src = fmt.Sprintf("hostPath %s (%s)", v.HostPath.Path, v.HostPath.Type)
			}
			return fmt.Sprintf("%s, propagation %s", src, orNone(m.MountPropagation))
		}
		return "volume " + m.Name + " missing"
	}
	return ""
}

// secretVolume is the Secret whose volume is mounted at path ("" for none).
func (o object) secretVolume(path string) string {
	spec := o.Spec.Template.Spec
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "None"
	}
	return s
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
