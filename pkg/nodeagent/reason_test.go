package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

type getterFunc func(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)

func (f getterFunc) Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
	return f(ctx, name)
}

func TestReasonHandler(t *testing.T) {
	record := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: fencingv1alpha1.FencingRequestStatus{ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{
			{Namespace: "ns", Name: "db-0", UID: "u1", TerminationReason: termreason.IntolerableTaint},
		}}}
	recorded := getterFunc(func(_ context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
		if name != "node-1" {
			return nil, apierrors.NewNotFound(fencingv1alpha1.Resource.GroupResource(), name)
		}
		return record, nil
	})
	for _, tc := range []struct {
		name    string
		records RecordGetter
		query   string
		want    int
		reason  string
	}{
		{name: "a pod force-deleted from this node", records: recorded, query: "?uid=u1", want: http.StatusOK, reason: termreason.IntolerableTaint},
		{name: "another pod", records: recorded, query: "?uid=u2", want: http.StatusNotFound},
		{name: "no uid", records: recorded, want: http.StatusBadRequest},
		{name: "no record of this node", records: getterFunc(func(_ context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
			return nil, apierrors.NewNotFound(fencingv1alpha1.Resource.GroupResource(), name)
		}), query: "?uid=u1", want: http.StatusNotFound},
		{name: "the record cannot be read", records: getterFunc(func(context.Context, string) (*fencingv1alpha1.FencingRequest, error) {
			return nil, errors.New("connection refused")
		}), query: "?uid=u1", want: http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			ReasonHandler(context.Background(), tc.records, "node-1").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, termreason.ServedPath+tc.query, nil))
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want != http.StatusOK {
				return
			}
			var got termreason.ServedReason
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got != (termreason.ServedReason{Namespace: "ns", Name: "db-0", UID: "u1", Reason: tc.reason}) {
				t.Errorf("served %+v", got)
			}
		})
	}
}
