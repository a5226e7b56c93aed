package cli

//go:generate go tool genqlient genqlient.yaml
