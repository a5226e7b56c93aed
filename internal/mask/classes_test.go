package mask_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskgraph/taskgraph/internal/mask"
)

// textCase is a text and what it masks to ("" in want: unchanged).
type textCase struct{ name, in, want string }

// runText checks a class's cases: each masks as wanted, and masking again
// changes nothing.
func runText(t *testing.T, cases []textCase) {
	t.Helper()
	m := mask.Default()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := tc.want
			if want == "" {
				want = tc.in
			}
			got := m.String(tc.in)
			require.Equal(t, want, got)
			require.Equal(t, got, m.String(got), "masking again changes nothing")
		})
	}
}

// jsonCase is a JSON document and what it masks to ("" in want: unchanged).
type jsonCase struct{ name, in, want string }

func runJSON(t *testing.T, cases []jsonCase) {
	t.Helper()
	m := mask.Default()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, changed, err := m.JSON(json.RawMessage(tc.in))
			require.NoError(t, err)
			if tc.want == "" {
				require.False(t, changed, "%s", out)
				require.JSONEq(t, tc.in, string(out))
			} else {
				require.True(t, changed)
				require.JSONEq(t, tc.want, string(out))
			}
			again, changed, err := m.JSON(out)
			require.NoError(t, err)
			require.False(t, changed, "masking again changes nothing")
			require.Equal(t, string(out), string(again))
		})
	}
}

// The classes a hostile review found unmasked, each with its neighbours: forms
// that must be masked and look-alikes that must not.

func TestURLUserinfo(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"Password", "postgres://app:hunter2@db.internal:5432/x", "postgres://app:******@db.internal:5432/x"},
		{"HTTPS", "GET https://bob:s3cr%40t@api.example.com/v1 failed", "GET https://bob:******@api.example.com/v1 failed"},
		{"EmptyUser", "redis://:pa55word@cache:6379", "redis://:******@cache:6379"},
		{"TokenAsUser", "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r.git", "https://******@github.com/o/r.git"},
		{"InQuotes", `dsn "amqp://guest:guest@mq/"`, `dsn "amqp://guest:******@mq/"`},
		{"KeepsAPlainURL", "https://example.com/a/b?page=2", ""},
		{"AShortUserIsAnAddress", "ssh://git@github.com/o/r", "ssh://g***@github.com/o/r"},
		{"KeepsAPortWithoutUserinfo", "http://localhost:8080/x", ""},
	})
}

func TestSecretKeys(t *testing.T) {
	t.Parallel()
	runJSON(t, []jsonCase{
		{"Pwd", `{"pwd": "x1", "user_pwd": "x2", "dbPwd": 3}`, `{"pwd": "******", "user_pwd": "******", "dbPwd": "******"}`},
		{"Passphrase", `{"passphrase": "correct horse", "keyPassphrase": "x"}`, `{"passphrase": "******", "keyPassphrase": "******"}`},
		{"Passcode", `{"passcode": "1234"}`, `{"passcode": "******"}`},
		{"Pin", `{"pin": "1234", "PIN": 9876, "pinCode": "0000", "card_pin": "1111", "userPIN": "2222", "pin2": "3"}`,
			`{"pin": "******", "PIN": "******", "pinCode": "******", "card_pin": "******", "userPIN": "******", "pin2": "******"}`},
		{"CVV", `{"cvv": "123", "cardCVV": 456, "cvc2": "789", "cvn": "000"}`, `{"cvv": "******", "cardCVV": "******", "cvc2": "******", "cvn": "******"}`},
		{"OTP", `{"otp": "654321", "otpCode": "1", "sms_otp": "2", "OTPSecret": "3", "totp": "4"}`,
			`{"otp": "******", "otpCode": "******", "sms_otp": "******", "OTPSecret": "******", "totp": "******"}`},
		{"AccessKey", `{"accessKey": "AKIA1", "access_key_id": "AKIA2", "secretAccessKey": "s"}`, `{"accessKey": "******", "access_key_id": "******", "secretAccessKey": "******"}`},
		{"SessionID", `{"session_id": "abc", "sessionId": "def", "JSESSIONID": "ghi", "sid": "jkl"}`, `{"session_id": "******", "sessionId": "******", "JSESSIONID": "******", "sid": "******"}`},
		{"Headers", `{"headers": {"X-Access-Key": "k1", "X-Auth-Token": "t", "X-Session-Id": "s", "Accept": "text/plain"}}`,
			`{"headers": {"X-Access-Key": "******", "X-Auth-Token": "******", "X-Session-Id": "******", "Accept": "text/plain"}}`},
		{"KeepsWordsThatOnlyContainAShortName", `{"shipping": "express", "spinner": true, "mapping": "a", "opinion": "b", "footprint": "c", "hotplug": "d", "considered": "e", "sidebar": "f", "insider": "g"}`, ""},
	})
}

func TestAuthorizationSchemes(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"Token", "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "Authorization: Token ******"},
		{"TokenAlone", "sent token 9944b09199c62bcf", "sent token ******"},
		{"Digest", `Authorization: Digest username="Mufasa", realm="http-auth@example.org", nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", response="8ca523f5e9506fed4657c9700eebdbec"`,
			"Authorization: Digest ******"},
		{"DigestInText", `retrying with digest username="bob", response="6629fae49393a05397450978507c4ef1" now`, "retrying with digest ****** now"},
		{"Negotiate", "Negotiate YIIJvwYGKwYBBQUCoIIJszCCCa+gMDAuBgkqhkiC9xIBAgIGCSqGSIb3EgECAgYKKwYBBAGCNwICHgYKKwYBBAGCNwICCg==", "Negotiate ******"},
		{"AnyValueOfAnAuthorizationHeader", "Authorization: 9944b09199c62bcf9418ad846dd0e4bb", "Authorization: ******"},
		{"ProxyAuthorization", "Proxy-Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Proxy-Authorization: Basic ******"},
		{"Cookie", "Cookie: sid=31d4d96e407aad42; theme=dark", "Cookie: ******"},
		{"SetCookie", "Set-Cookie: id=a3fWa; Expires=Thu, 21 Oct 2026 07:28:00 GMT; Secure", "Set-Cookie: ******"},
		{"InJSONText", `request {"Authorization": "Bearer abc.def.ghi", "Accept": "*/*"}`, `request {"Authorization": "Bearer ******", "Accept": "*/*"}`},
		{"KeepsTokenAsAWord", "the token expired; token refresh failed", ""},
		{"KeepsBasicAsAWord", "basic checks passed", ""},
	})
}

func TestHeaderAndKeyValueSecrets(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"AccessKeyHeader", "X-Access-Key: AKIAIOSFODNN7EXAMPLE", "X-Access-Key: ******"},
		{"ApiKeyHeader", "x-api-key:k-123", "x-api-key:******"},
		{"AuthTokenHeader", "X-Auth-Token: 0f2e7a", "X-Auth-Token: ******"},
		{"PasswordColon", "login failed for bob, password: hunter2", "login failed for bob, password: ******"},
		{"QuotedJSONInText", `body={"user":"bob","password":"hunter2","n":1}`, `body={"user":"bob","password":"******","n":1}`},
		{"SingleQuoted", `{'client_secret': 'abc'}`, `{'client_secret': '******'}`},
		{"EscapedQuoteInValue", `"passwd": "a\"b", "x": 1`, `"passwd": "******", "x": 1`},
		{"SessionID", "session_id: 8f14e45f", "session_id: ******"},
		{"KeepsOtherHeaders", "Content-Type: application/json", ""},
		{"KeepsATimeOfDay", "at 10:30: done", ""},
	})
}

func TestJSONInAString(t *testing.T) {
	t.Parallel()
	runJSON(t, []jsonCase{
		{"ObjectInAString", `{"body": "{\"password\":\"hunter2\",\"user\":\"bob\"}"}`, `{"body": "{\"password\":\"******\",\"user\":\"bob\"}"}`},
		{"PhoneInAnEmbeddedObject", `{"payload": "{\"phone\": \"13912345678\"}"}`, `{"payload": "{\"phone\":\"139****5678\"}"}`},
		{"ArrayInAString", `{"list": "[{\"name\":\"token\",\"value\":\"t1\"}]"}`, `{"list": "[{\"name\":\"token\",\"value\":\"******\"}]"}`},
		{"TwiceEmbedded", `{"outer": "{\"inner\":\"{\\\"secret\\\":\\\"s\\\"}\"}"}`, `{"outer": "{\"inner\":\"{\\\"secret\\\":\\\"******\\\"}\"}"}`},
		{"KeepsACleanEmbeddedDocumentAsWritten", `{"body": "{ \"a\": 1,  \"b\": [true] }"}`, ""},
		{"KeepsTextThatOnlyLooksLikeJSON", `{"note": "[info] all good [ok]"}`, ""},
	})
}

func TestNameValuePairs(t *testing.T) {
	t.Parallel()
	runJSON(t, []jsonCase{
		{"NameValue", `{"fields": [{"name": "password", "value": "hunter2"}, {"name": "user", "value": "bob"}]}`,
			`{"fields": [{"name": "password", "value": "******"}, {"name": "user", "value": "bob"}]}`},
		{"HARHeaders", `{"headers": [{"name": "Authorization", "value": "Bearer x"}, {"name": "Accept", "value": "*/*"}]}`,
			`{"headers": [{"name": "Authorization", "value": "******"}, {"name": "Accept", "value": "*/*"}]}`},
		{"KeyValue", `[{"Key": "X-Api-Key", "Value": "k1"}, {"key": "pin", "values": ["1234"]}]`, `[{"Key": "X-Api-Key", "Value": "******"}, {"key": "pin", "values": "******"}]`},
		{"KeepsOrdinaryPairs", `[{"name": "city", "value": "上海"}, {"name": "passengers", "value": 3}]`, ""},
	})
}

func TestURLParameters(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"Pwd", "https://h/login?user=bob&pwd=hunter2", "https://h/login?user=bob&pwd=******"},
		{"Auth", "https://h/cb?auth=abc123&x=1", "https://h/cb?auth=******&x=1"},
		{"OAuthCode", "https://app/callback?code=SplxlOBeZQQYbYS6WxSbIA&state=xyz", "https://app/callback?code=******&state=xyz"},
		{"AmzCredential", "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20261129%2Fus-east-1%2Fs3", "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=******"},
		{"Passphrase", "?passphrase=open-sesame", "?passphrase=******"},
		{"PinAndOTP", "?pin=1234&otp=654321", "?pin=******&otp=******"},
		{"SessionID", "?session_id=abc&sessionid=def&sid=ghi", "?session_id=******&sessionid=******&sid=******"},
		{"JSessionID", "/cart;jsessionid=0AAB6C8DE415", "/cart;jsessionid=******"},
		{"Credential", "?credential=xyz", "?credential=******"},
		{"KeepsCodeOutsideAQuery", "HTTP status code=404, error_code=E12", ""},
		{"KeepsLookAlikes", "?zipcode=10001&barcode=123&author=bob&spin=3", ""},
	})
}

func TestPhoneNumbers(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"AfterUnderscore", "tel_13912345678", "tel_139****5678"},
		{"AfterLetters", "mobile13912345678", "mobile139****5678"},
		{"BeforeLetters", "13912345678abc", "139****5678abc"},
		{"BetweenUnderscores", "u_13912345678_x", "u_139****5678_x"},
		{"FullWidth", "电话：１３９１２３４５６７８。", "电话：１３９****５６７８。"},
		{"Dotted", "call 139.1234.5678", "call 139******5678"},
		{"Spaced", "139 1234 5678", "139******5678"},
		{"MixedSeparators", "139-1234 5678", "139******5678"},
		{"With0086", "0086 13912345678", "008*********5678"},
		{"FullWidthPlus", "＋8613912345678", "＋86*******5678"},
		{"NextToEachOther", "13912345678,13812345678", "139****5678,138****5678"},
		{"KeepsALongerNumber", "order 139123456789", ""},
		{"KeepsANumberGluedToDigits", "2413912345678", ""},
		{"KeepsANonMobilePrefix", "ref 12345678901", ""},
	})
}

func TestNationalIDs(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"EighteenDigits", "110105194912310021", "110***********0021"},
		{"FifteenDigits", "old id 110105491231002 on file", "old id 110********1002 on file"},
		{"GluedToLetters", "id_11010519491231002X", "id_110***********002X"},
		{"FifteenGluedToLetters", "sfz110105491231002", "sfz110********1002"},
		{"KeepsFifteenDigitsThatAreNoDate", "id 110105491331002", ""},
		{"KeepsSixteenDigits", "n 1101054912310021", ""},
	})
}

func TestBankCards(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"Grouped667", "card 622202 020011 2233446", "card *****************3446"},
		{"Grouped465", "amex 3782 822463 10005", "amex *************0005"},
		{"Amex15", "378282246310005", "***********0005"},
		{"GluedToLetters", "card4111111111111111x", "card************1111x"},
		{"FullWidth", "４１１１１１１１１１１１１１１１", "************１１１１"},
		{"KeepsALuhnInvalidNumber", "order 4111111111111112", ""},
		{"KeepsThirteenDigits", "ts 1764374400000", ""},
	})
}

func TestEmails(t *testing.T) {
	t.Parallel()
	runText(t, []textCase{
		{"HostWithoutADot", "mail alice@localhost now", "mail a***@localhost now"},
		{"IntranetHost", "bob.smith@intranet", "b***@intranet"},
		{"GluedAfterUnderscore", "user_alice@example.com", "u***@example.com"},
		{"KeepsAPackageVersion", "installed lodash@4.17.21", ""},
		{"KeepsAHandle", "ping @alice", ""},
	})
}
