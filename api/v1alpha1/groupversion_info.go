// Package v1alpha1 holds the App and Notification custom resources (group
// plumb.dev, version v1alpha1): the Go types, their generated deep-copy functions and the CRD
// that controller-gen generates from them.
//
// +kubebuilder:object:generate=true
// +groupName=plumb.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: "plumb.dev", Version: "v1alpha1"}

// AddToScheme registers this package's types with a scheme. It has the
// signature of runtime.SchemeBuilder functions, so callers can compose it.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &App{}, &AppList{}, &Notification{}, &NotificationList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
