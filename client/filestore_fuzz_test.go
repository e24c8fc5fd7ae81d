package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeStoreFile: any input is refused or accepted without a panic,
// and what is accepted survives a write and a read unchanged.
func FuzzDecodeStoreFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"records":[]}`))
	f.Add([]byte(`{"version":1,"records":[{"digest":"a","resource":"todos","state":"live","cursor":"1.E.3","copy":true,"rows":{"t1":{"id":"t1"}}}],"queue":{"seq":2,"mutations":[{"key":"k2","seq":2,"resource":"todos","name":"add","args":{"n":1},"at":1700000000000,"strategy":"server-wins","ops":[{"op":"upsert","key":"t1","row":{"id":"t1"},"resource":"todos"},{"op":"delete","key":"t0","resource":"todos"}]}]}}`))
	f.Add([]byte(`{"version":1,"records":[],"queue":{"seq":1,"mutations":[{"key":"k","seq":1,"resource":"todos","name":"x","at":1,"strategy":"last-write-wins:updatedAt","acked":true,"cursor":"1.E.9"}]}}`))
	f.Add([]byte(`{"version":1,"records":[{"digest":"a","rows":{"t1":[]}}]}`))
	f.Add([]byte(`{"version":1,"queue":{"seq":0,"mutations":[{"key":"k","seq":3}]}}`))
	f.Add([]byte(`{"version":1,"records":[],"meta":{"origin":"go-ABC","principal":"u1","bound":true,"max_frame_bytes":65536}}`))
	f.Add([]byte(`{"version":1,"records":[],"meta":{"origin":"go-\u0001","max_frame_bytes":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, q, m, err := decodeStoreFile(data)
		if err != nil {
			return
		}
		ff := fileFormat{Version: fileFormatVersion}
		for _, r := range recs {
			ff.Records = append(ff.Records, r)
		}
		ff.Queue = &q
		ff.Meta = &m
		out, err := json.Marshal(ff)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		recs2, q2, m2, err := decodeStoreFile(out)
		if err != nil {
			t.Fatalf("a re-encoded store is refused: %v\n%s", err, out)
		}
		if len(recs2) != len(recs) || q2.Seq != q.Seq || len(q2.Mutations) != len(q.Mutations) || m2 != m {
			t.Fatalf("round trip changed the store:\n%s", out)
		}
		for d, r := range recs {
			if !reflect.DeepEqual(normRecord(r), normRecord(recs2[d])) {
				t.Fatalf("record %s changed: %+v vs %+v", d, r, recs2[d])
			}
		}
	})
}

func normRecord(r Record) Record {
	if len(r.Rows) == 0 {
		r.Rows = nil
	}
	if len(r.Conditions) == 0 {
		r.Conditions = nil
	}
	return r
}
