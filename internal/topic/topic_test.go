package topic

import "testing"

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Changelog("shop", "orders", 3, "count"), "shop.orders.v3.count.changelog"},
		{Repartition("shop", "orders", 1, "by-region"), "shop.orders.v1.repartition.by-region"},
		{CDCTable("shop", "public", "users"), "shop.cdc.public.users"},
		{DLQ("shop"), "shop.dlq"},
		{CDCPosition("shop", "tarn_shop"), "shop.cdc-position.tarn_shop"},
		{ViewPrefix("shop", "orders", 2), "shop.orders.v2."},
		{Group("shop", "orders", 2), "shop.orders.v2"},
		{Versions("shop"), "shop.versions"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"orders", "top_10", "by-region", "A9"} {
		if err := ValidateName("view", ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "spa ce", "ümlaut", string(make([]byte, 100))} {
		if err := ValidateName("view", bad); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", bad)
		}
	}
}
