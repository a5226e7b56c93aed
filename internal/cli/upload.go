package cli

import "errors"

// upload stands for an Upload variable: the file itself travels as a part
// of the multipart request (GraphQL multipart request spec), and the
// variable is null in the operations part.
type upload struct{}

func marshalUpload(*upload) ([]byte, error) { return []byte("null"), nil }

func unmarshalUpload([]byte, *upload) error { return errors.New("an Upload is never returned") }
