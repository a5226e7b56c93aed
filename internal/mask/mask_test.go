package mask_test

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/internal/mask"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestString(t *testing.T) {
	t.Parallel()
	m := mask.Default()

	cases := []struct {
		name, in, want string
	}{
		// Chinese mobile numbers.
		{"CNMobile", "call 13800138000 now", "call 138****8000 now"},
		{"CNMobileWithPlus86", "+8613800138000", "+86*******8000"},
		{"CNMobileWithPlus86AndSpace", "+86 13800138000", "+86********8000"},
		{"CNMobileWithPlus86AndDash", "+86-13800138000", "+86********8000"},
		{"CNMobileWith86", "8613800138000", "861******8000"},
		{"CNMobileInGroups", "138 0013 8000", "138******8000"},
		{"CNMobileWithDashes", "138-0013-8000", "138******8000"},
		{"CNMobileInChineseText", "电话13800138000。", "电话138****8000。"},
		// Other E.164 numbers.
		{"E164US", "tel:+14155552671", "tel:+14*****2671"},
		{"E164UK", "+442071838750", "+44******8750"},
		{"E164FifteenDigits", "+861380013800012", "+86*********0012"},
		// Resident ID numbers.
		{"ResidentID", "110105194912310021", "110***********0021"},
		{"ResidentIDTrailingX", "id 11010519491231002X.", "id 110***********002X."},
		{"ResidentIDTrailingLowerX", "11010519491231002x", "110***********002x"},
		{"ResidentIDInChineseText", "身份证11010519491231002X号", "身份证110***********002X号"},
		// Bank cards (Luhn-valid numbers).
		{"BankCard16", "4111111111111111", "************1111"},
		{"BankCard19", "card 6222020200112233446", "card ***************3446"},
		{"BankCardInGroups", "4111 1111 1111 1111", "***************1111"},
		{"BankCardInDashedGroups", "4111-1111-1111-1111", "***************1111"},
		// E-mail.
		{"Email", "alice.smith@example.com", "a***@example.com"},
		{"EmailShortLocalPart", "mail a@b.co", "mail a***@b.co"},
		{"EmailPlusTag", "bob+tasks@mail.example.org", "b***@mail.example.org"},
		// Tokens.
		{"Bearer", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-_x", "Authorization: Bearer ******"},
		{"BearerLowerCase", "bearer abc123", "bearer ******"},
		{"Basic", "Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ******"},
		{"BasicPadded", "Basic YWI6Yw==", "Basic ******"},
		// Secrets in URLs.
		{"URLToken", "https://x.example/cb?token=abc&page=2", "https://x.example/cb?token=******&page=2"},
		{"URLKey", "https://x.example/cb?page=2&key=AIzaSy123", "https://x.example/cb?page=2&key=******"},
		{"URLSig", "https://x.example/f?sig=ab%2Fcd&se=2026", "https://x.example/f?sig=******&se=2026"},
		{"URLAccessToken", "?access_token=t1", "?access_token=******"},
		{"URLAPIKeyGlued", "?apikey=t1&apiKey=t2", "?apikey=******&apiKey=******"},
		{"URLRefreshToken", "?refresh_token=t1", "?refresh_token=******"},
		{"URLClientSecret", "?client_id=app&client_secret=s3", "?client_id=app&client_secret=******"},
		{"URLAmzSignature", "?X-Amz-Credential=a&X-Amz-Signature=ff00", "?X-Amz-Credential=******&X-Amz-Signature=******"},
		{"URLAmzSecurityToken", "?X-Amz-Security-Token=FQo", "?X-Amz-Security-Token=******"},
		{"URLDashedAPIKey", "?x-api-key=k", "?x-api-key=******"},
		{"URLPassword", "postgres://db?password=hunter2&sslmode=disable", "postgres://db?password=******&sslmode=disable"},
		{"URLSecretInQuotes", `url "https://h/?token=abc" done`, `url "https://h/?token=******" done`},
		// Masked values next to each other stay masked when masked again.
		{"PhoneFollowedByDigitGroups", "13800138000-1234-1234-1235", "138*******************1235"},
	}
	for _, tc := range cases {
		t.Run("Masks"+tc.name, func(t *testing.T) {
			t.Parallel()
			got := m.String(tc.in)
			require.Equal(t, tc.want, got)
			require.Equal(t, got, m.String(got), "masking again changes nothing")
		})
	}

	keep := []struct {
		name, in string
	}{
		{"OrdinaryID", "task 12345 done"},
		{"ShortNumbers", "retry 3 of 5 after 30s, code 404"},
		{"Date", "2026-11-29"},
		{"DateTime", "2026-11-29T10:00:00+08:00"},
		{"CompactDateTime", "20261129103000"},
		{"TenDigitOrderNumber", "order 1234567890"},
		{"UnixSeconds", "at 1764374400"},
		{"UnixMillis", "at 1764374400000"},
		{"NineteenDigitOrderNumber", "order 2026112912345678901"},
		{"SnowflakeID", "id 1541815603606036480"},
		{"ElevenDigitsNotAMobile", "ref 12345678901"},
		{"Price", "price 19.99 CNY, 3.1415926535897932384 rad"},
		{"IPAddress", "from 10.0.0.1:8080"},
		{"UUID", "123e4567-e89b-12d3-a456-426614174000"},
		{"PlainURL", "https://example.com/a?page=2&sort_key=name&monkey=1&tokens=3"},
		{"BasicAsAWord", "running basic checks: basic validation failed"},
		{"BearerAlone", "missing bearer"},
		{"AtSignWithoutDomain", "ping @alice"},
		{"Masked", "138****8000 a***@example.com token=******"},
	}
	for _, tc := range keep {
		t.Run("Keeps"+tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.in, m.String(tc.in))
		})
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	m := mask.Default()

	maskJSON := func(t *testing.T, in string) (string, bool) {
		t.Helper()
		out, changed, err := m.JSON(json.RawMessage(in))
		require.NoError(t, err)
		require.True(t, json.Valid(out), "%s", out)
		return string(out), changed
	}

	t.Run("MasksSecretKeysAtAnyDepth", func(t *testing.T) {
		t.Parallel()
		out, changed := maskJSON(t, `{
			"password": "hunter2",
			"Authorization": "Basic dXNlcjpwYXNz",
			"api_key": 12345,
			"headers": {"X-Api-Key": "k1", "Cookie": "sid=1", "Accept": "text/plain"},
			"accounts": [{"user": "bob", "secret": {"nested": true}}, {"user": "eve", "apiKey": "k2"}],
			"db": {"conn": {"PASSWD": "x", "privateKey": "y", "client_credentials": ["a", "b"]}},
			"note": "keep me"
		}`)
		require.True(t, changed)
		require.JSONEq(t, `{
			"password": "******",
			"Authorization": "******",
			"api_key": "******",
			"headers": {"X-Api-Key": "******", "Cookie": "******", "Accept": "text/plain"},
			"accounts": [{"user": "bob", "secret": "******"}, {"user": "eve", "apiKey": "******"}],
			"db": {"conn": {"PASSWD": "******", "privateKey": "******", "client_credentials": "******"}},
			"note": "keep me"
		}`, out)
	})

	t.Run("KeepsNullSecrets", func(t *testing.T) {
		t.Parallel()
		out, changed := maskJSON(t, `{"token":null}`)
		require.False(t, changed)
		require.JSONEq(t, `{"token":null}`, out)
	})

	t.Run("MasksValuesByShape", func(t *testing.T) {
		t.Parallel()
		out, changed := maskJSON(t, `{"contact":{"mobile":"13800138000","mail":"alice@example.com"},"ids":["110105194912310021"],"note":"callback https://h/?sig=abc"}`)
		require.True(t, changed)
		require.JSONEq(t, `{"contact":{"mobile":"138****8000","mail":"a***@example.com"},"ids":["110***********0021"],"note":"callback https://h/?sig=******"}`, out)
	})

	t.Run("MasksNumbersGivenAsNumbers", func(t *testing.T) {
		t.Parallel()
		out, changed := maskJSON(t, `{"phone":13800138000,"card":4111111111111111,"list":[8613800138000]}`)
		require.True(t, changed)
		require.JSONEq(t, `{"phone":"138****8000","card":"************1111","list":["861******8000"]}`, out)
	})

	t.Run("KeepsOrdinaryNumbersAsNumbers", func(t *testing.T) {
		t.Parallel()
		in := `{"id":12345,"order":1234567890,"big":2026112912345678901,"ratio":0.13800138000,"exp":1.3800138e10,"neg":-5,"ts":1764374400000}`
		out, changed := maskJSON(t, in)
		require.False(t, changed)
		require.JSONEq(t, in, out)
		require.Contains(t, out, `"big":2026112912345678901`, "large integers keep their digits")
	})

	t.Run("ReportsNoChangeForCleanInputWrittenDifferently", func(t *testing.T) {
		t.Parallel()
		out, changed := maskJSON(t, "{ \"b\" : [1, 2.50, \"x\"],\n\t\"a\": {\"z\": true, \"y\": null} }")
		require.False(t, changed)
		require.Equal(t, `{"a":{"y":null,"z":true},"b":[1,2.50,"x"]}`, out)
		for _, in := range []string{`"plain"`, `42`, `[]`, `{}`, `null`, `true`, `"a<b&c"`} {
			_, changed := maskJSON(t, in)
			require.False(t, changed, in)
		}
	})

	t.Run("ReportsChangeOfADeepValue", func(t *testing.T) {
		t.Parallel()
		_, changed := maskJSON(t, `[[[{"x":["ok","13800138000"]}]]]`)
		require.True(t, changed)
	})

	t.Run("PassesEmptyInputThrough", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{"", "  \n"} {
			out, changed, err := m.JSON(json.RawMessage(in))
			require.NoError(t, err)
			require.False(t, changed)
			require.Equal(t, in, string(out))
		}
	})

	t.Run("RejectsInvalidJSON", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{`{`, `{"a":}`, `nope`, `{"a":"13800138000"} {"b":1}`, `1 2`, `{} x`} {
			_, _, err := m.JSON(json.RawMessage(in))
			require.Error(t, err, in)
		}
	})
}

type contact struct {
	Phone string `json:"phone"`
	Token string `json:"token"`
}

func TestFields(t *testing.T) {
	t.Parallel()
	m := mask.Default()

	t.Run("MasksGoValuesOfAnyType", func(t *testing.T) {
		t.Parallel()
		got := m.Fields(map[string]any{
			"phone":      "13800138000",
			"phoneInt":   int64(13800138000),
			"phoneFloat": float64(13800138000), // decoded without UseNumber
			"phones":     []string{"13800138000", "ok"},
			"contact":    contact{Phone: "13800138000", Token: "t"},
			"byName":     map[string]string{"mail": "alice@example.com"},
			"password":   "x",
			"count":      3,
			"ratio":      0.5,
			"ok":         true,
			"none":       nil,
			"err":        errors.New("dial 13800138000: refused"),
		})
		require.Equal(t, "138****8000", got["phone"])
		require.Equal(t, "138****8000", got["phoneInt"])
		require.Equal(t, "138****8000", got["phoneFloat"])
		require.Equal(t, []any{"138****8000", "ok"}, got["phones"])
		require.Equal(t, map[string]any{"phone": "138****8000", "token": "******"}, got["contact"])
		require.Equal(t, map[string]any{"mail": "a***@example.com"}, got["byName"])
		require.Equal(t, mask.Redacted, got["password"])
		require.Equal(t, 3, got["count"])
		require.Equal(t, 0.5, got["ratio"])
		require.Equal(t, true, got["ok"])
		require.Nil(t, got["none"])
		require.Equal(t, "dial 138****8000: refused", got["err"])
	})

	t.Run("KeepsEmptyFields", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, m.Fields(nil))
		require.Empty(t, m.Fields(map[string]any{}))
	})

	t.Run("MasksAnUnencodableValueByItsText", func(t *testing.T) {
		t.Parallel()
		got := m.Fields(map[string]any{"f": func() {}})
		require.IsType(t, "", got["f"])
	})
}

func TestCustomMasker(t *testing.T) {
	t.Parallel()
	m := &mask.Masker{SecretKeys: []string{"pin"}}
	out, changed, err := m.JSON(json.RawMessage(`{"PIN":1234,"phone":"13800138000"}`))
	require.NoError(t, err)
	require.True(t, changed)
	require.JSONEq(t, `{"PIN":"******","phone":"13800138000"}`, string(out), "only the configured rules apply")
}

// FuzzMaskJSON: valid JSON in gives valid JSON out, masking is idempotent
// (of JSON and of the same bytes as text), and nothing panics.
func FuzzMaskJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`null`,
		`"13800138000"`,
		`{"phone":13800138000,"card":4111111111111111,"n":12345}`,
		`{"password":"x","nested":[{"api_key":"k","x-api-key":null}]}`,
		`["+86 13800138000","11010519491231002X","alice@example.com","Bearer abc.def","https://h/?token=a&sig=b"]`,
		`{"a":"13800138000-1234-1234-1235","b":"4111 1111 1111 1111 13800138000"}`,
		`{"u":"\u003c\u0026\u003e\ud83d\ude00","f":1.5e300,"z":-0}`,
		`[[[[[[[[["deep 13800138000"]]]]]]]]]`,
		// The classes a hostile review found.
		`{"dsn":"postgres://app:hunter2@db/x","git":"https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/r"}`,
		`{"pwd":"a","pin":1234,"cvv":"123","otp":"1","accessKey":"k","session_id":"s","headers":{"X-Access-Key":"k"}}`,
		`["Authorization: Token abc123def","Digest username="a", response="b"","Cookie: sid=1; x=2","token expired"]`,
		`{"body":"{"password":"x","inner":"{\"token\":\"t\"}"}","list":"[1, 2]"}`,
		`[{"name":"password","value":"x"},{"Key":"pin","Values":["1"]},{"name":"city","value":"上海"}]`,
		`"?pwd=a&auth=b&code=c&X-Amz-Credential=d;jsessionid=e password: f "api_key": "g""`,
		`["tel_13912345678","１３９１２３４５６７８","139.1234.5678","0086 13912345678","13912345678,13812345678"]`,
		`["110105491231002","id_11010519491231002X","622202 020011 2233446","3782 822463 10005","alice@localhost"]`,
	} {
		f.Add([]byte(seed))
	}
	m := mask.Default()
	f.Fuzz(func(t *testing.T, in []byte) {
		// The same bytes as free text: masking is idempotent there too.
		if s := string(in); utf8.ValidString(s) {
			once := m.String(s)
			if twice := m.String(once); twice != once {
				t.Fatalf("text not idempotent:\n in:    %q\n once:  %q\n twice: %q", s, once, twice)
			}
		}
		if !json.Valid(in) {
			_, _, _ = m.JSON(in) // must not panic
			return
		}
		once, _, err := m.JSON(in)
		if err != nil {
			t.Fatalf("valid JSON %q rejected: %v", in, err)
		}
		if !json.Valid(once) {
			t.Fatalf("masking %q gave invalid JSON %q", in, once)
		}
		twice, changed, err := m.JSON(once)
		if err != nil {
			t.Fatalf("masked JSON %q rejected: %v", once, err)
		}
		if changed || string(twice) != string(once) {
			t.Fatalf("not idempotent:\n in:    %q\n once:  %q\n twice: %q", in, once, twice)
		}
	})
}

// TestMaskingByKeyName: a key that says what it holds is masked whatever
// its value looks like; the system's own identifiers are never taken for
// phones or cards.
func TestMaskingByKeyName(t *testing.T) {
	t.Parallel()
	m := mask.Default()
	for _, tc := range []struct{ in, want string }{
		// Not a phone by its looks (letters, too short), a phone by its key.
		{`{"phone":"call 555-0199"}`, `{"phone":"cal******0199"}`},
		{`{"mobileNo":"12345"}`, `{"mobileNo":"*****"}`},
		{`{"tel":"+44 20 7946 0958"}`, `{"tel":"+44*********0958"}`},
		{`{"cardNumber":"4111-1111-1111-1112"}`, `{"cardNumber":"***************1112"}`},
		{`{"id_card":"ABC123456"}`, `{"id_card":"ABC**3456"}`},
		{`{"email":"not-an-address"}`, `{"email":"n*************"}`},
		{`{"contactEmail":"bob@example.com"}`, `{"contactEmail":"b***@example.com"}`},
		{`{"phone":13800138000}`, `{"phone":"138****8000"}`},
		// Not what the key says: hotel is no tel, cardinal no card.
		{`{"hotel":"Ritz","cardinal":"north"}`, `{"hotel":"Ritz","cardinal":"north"}`},
		// The system's identifiers stay what they are.
		{`{"artifact":17179869193,"taskIds":[12884901888,1],"id":13800138000}`, `{"artifact":17179869193,"taskIds":[12884901888,1],"id":13800138000}`},
		// A string under an id key is still masked by its looks.
		{`{"id":"13800138000"}`, `{"id":"138****8000"}`},
	} {
		out, _, err := m.JSON(json.RawMessage(tc.in))
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(out), tc.in)
		again, _, err := m.JSON(out)
		require.NoError(t, err)
		require.JSONEq(t, string(out), string(again), "masking is idempotent: %s", tc.in)
	}
	got := m.Fields(map[string]any{"artifact": 17179869193, "kind": "EXPORT"})
	require.Equal(t, 17179869193, got["artifact"], "an audit record's artifact")
}
