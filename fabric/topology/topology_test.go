package topology

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TwoSwitchesFile is ibsim's 2sw2path4hca.ibnd: two switches joined by two parallel links
// (ports 3 and 5), two HCAs on each. Tests of other packages read it too.
const TwoSwitchesFile = "testdata/2sw2path4hca.ibnd"

func TestParseExample(t *testing.T) {
	b, err := os.ReadFile(TwoSwitchesFile)
	if err != nil {
		t.Fatal(err)
	}
	top, err := Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sws, hcas := top.Switches(), top.HCAs()
	if len(sws) != 2 || len(hcas) != 4 || sws[0].ID != "Switch1" || hcas[3].ID != "Hca4" {
		t.Fatalf("switches %v hcas %v", sws, hcas)
	}
	if e := top.Node("Switch1").Links[5]; e != (End{"Switch2", 5}) {
		t.Errorf("Switch1 port 5 → %+v", e)
	}
	if e := top.Node("Hca3").Links[1]; e != (End{"Switch1", 2}) || top.Node("Hca3").Ports != 2 {
		t.Errorf("Hca3: %+v", top.Node("Hca3"))
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no nodes"},
		{"Switch 300 \"S\"\n", "line 1: Switch \"S\": 300 ports, want 1..254"},
		{"Hca 40 \"H\"\n", "line 1: Hca \"H\": 40 ports, want 1..32"},
		{"[1] \"S\"[1]\n", "line 1: a port line outside a node record"},
		{"Switch 2 \"S\"\n[3] \"H\"[1]\n", "line 2: port [3] of \"S\" (ports 1..2)"},
		{"Switch 2 \"S\"\nfoo\n", "line 2: \"foo\" is neither"},
		{"Switch 2 \"S\"\n[1] \"H\"[1]\n", "line 1: \"S\" port 1: no node \"H\""},
		{"Switch 2 \"S\"\n[1] \"H\"[1]\n\nHca 1 \"H\"\n", "line 1: \"S\" port 1 → \"H\" port 1 is not listed the other way"},
		{"Switch 2 \"S\"\n\nSwitch 2 \"S\"\n", "line 3: node \"S\" defined twice (first on line 1)"},
		{"Switch 2 \"S\"\n[1] \"H\"[1]\n[1] \"H\"[1]\n", "line 3: port 1 of \"S\" connected twice"},
		{"Hca 1 \"A\"\n[1] \"B\"[1]\n\nHca 1 \"B\"\n[1] \"A\"[1]\n", "line 1: \"A\" port 1: HCAs linked back to back"},
		{"Switch 2 \"S\"\n" + strings.Repeat("x", 5000) + "\n", "line 2: bufio.Scanner: token too long"},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q…", tc.in, err, tc.want)
		}
	}
}

// FuzzParse: any file is parsed or refused with an error, never a panic, and what is
// accepted is consistent (every link listed at both ends).
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(TwoSwitchesFile); err == nil {
		f.Add(b)
	}
	f.Add([]byte("Switch 2 \"S\"\n[1] \"H\"[1]\n\nHca 1 \"H\"\n[1] \"S\"[1]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		top, err := Parse(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, n := range top.Nodes {
			for p, e := range n.Links {
				far := top.Node(e.Node)
				if far == nil || far.Links[e.Port] != (End{n.ID, p}) {
					t.Fatalf("inconsistent link %s[%d] → %+v", n.ID, p, e)
				}
			}
		}
	})
}
