package cli

//go:generate go run -mod=mod github.com/Khan/genqlient genqlient.yaml
