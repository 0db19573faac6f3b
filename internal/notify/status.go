package notify

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// maxStatusMessage bounds the message of a Notification's Ready condition.
const maxStatusMessage = 1024

// StatusWriter is an Options.Report that writes a Notification's Ready
// condition: whether its sink takes what is sent, and if not why (the
// errors of this package name no address or token). It reads the
// Notification with reader, the API server rather than a cache, so that
// two changes in quick succession do not patch from the same stale copy,
// and patches its status with c.
func StatusWriter(reader client.Reader, c client.Client, log *zap.Logger) func(key types.NamespacedName, delivered bool, message string) {
	return func(key types.NamespacedName, delivered bool, message string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n := &plumbv1.Notification{}
		if err := reader.Get(ctx, key, n); err != nil {
			if !apierrors.IsNotFound(err) {
				log.Warn("Could not read a Notification to write its status", zap.Stringer("notification", key), zap.Error(err))
			}
			return
		}
		patch := client.MergeFrom(n.DeepCopy())
		cond := metav1.Condition{Type: plumbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: plumbv1.ReasonDelivered,
			Message: "the sink took the last event sent", ObservedGeneration: n.Generation}
		if !delivered {
			if len(message) > maxStatusMessage {
				message = strings.ToValidUTF8(message[:maxStatusMessage], "")
			}
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, plumbv1.ReasonDeliveryFailed, message
		}
		apimeta.SetStatusCondition(&n.Status.Conditions, cond)
		if err := c.Status().Patch(ctx, n, patch); err != nil && !apierrors.IsNotFound(err) {
			log.Warn("Could not write a Notification's status", zap.Stringer("notification", key), zap.Error(err))
		}
	}
}
