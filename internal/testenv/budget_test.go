package testenv

import "testing"

func TestBudgetSize(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		want, total, open, granted int
		size                       int
	}{
		{"an idle server grants what is asked", 20, 97, 5, 0, 20},
		{"a big pool takes half of what is free beyond the reserve", 44, 97, 5, 0, (97 - 5 - lightReserve) / 2},
		{"another client holds 15", 44, 97, 15, 0, (97 - 15 - lightReserve) / 2},
		{"another client holds 40", 44, 97, 45, 0, (97 - 45 - lightReserve) / 2},
		{"the process's other big pools count", 44, 97, 5, 30, (97 - 5 - lightReserve - 30) / 2},
		{"never below the floor", 44, 97, 90, 0, minPoolSize},
		{"the floor is capped by want", 3, 97, 90, 0, 3},
		{"a full server still gets the floor", 16, 97, 120, 0, minPoolSize},
	} {
		if got := budgetSize(tc.want, tc.total, tc.open, tc.granted); got != tc.size {
			t.Errorf("%s: budgetSize(%d, %d, %d, %d) = %d, want %d", tc.name, tc.want, tc.total, tc.open, tc.granted, got, tc.size)
		}
	}
}
