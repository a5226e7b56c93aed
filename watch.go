package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"taskgraph/app"
)

// runWatch subscribes to taskUpdated over graphql-transport-ws and prints one
// JSON line per committed change, until interrupted or the server ends it.
func runWatch(args []string) int {
	fs := flag.NewFlagSet("taskgraph watch", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8080", "taskgraph server URL")
	id := fs.String("id", "", "watch one task")
	where := fs.String("where", "", `watch tasks matching a TaskWhereInput given as JSON, e.g. {"type":"noop"}`)
	token := fs.String("token", os.Getenv("TASKGRAPH_TOKEN"), "bearer token, when the server requires one")
	fields := fs.String("fields", "id code status progressDone progressTotal cancelRequested lastError", "Task fields to print")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return app.ExitOK
		}
		return app.ExitUsage
	}
	vars := map[string]any{}
	if *id != "" {
		vars["id"] = *id
	}
	if *where != "" {
		var w map[string]any
		if err := json.Unmarshal([]byte(*where), &w); err != nil {
			fmt.Fprintln(os.Stderr, "watch: -where:", err)
			return 2
		}
		vars["where"] = w
	}
	u, err := url.Parse(*server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		fmt.Fprintln(os.Stderr, "watch: -server must be an http(s) URL")
		return 2
	}
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u.Path = strings.TrimSuffix(u.Path, "/") + "/query"

	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial(u.String(), http.Header{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "watch:", err)
		return 1
	}
	resp.Body.Close()
	defer conn.Close()
	init := map[string]any{}
	if *token != "" {
		init["Authorization"] = "Bearer " + *token
	}
	query := fmt.Sprintf(`subscription($id: ID, $where: TaskWhereInput) { taskUpdated(id: $id, where: $where) { %s } }`, *fields)
	for _, m := range []map[string]any{
		{"type": "connection_init", "payload": init},
		{"type": "subscribe", "id": "1", "payload": map[string]any{"query": query, "variables": vars}},
	} {
		if err := conn.WriteJSON(m); err != nil {
			fmt.Fprintln(os.Stderr, "watch:", err)
			return 1
		}
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		_ = conn.WriteJSON(map[string]any{"type": "complete", "id": "1"})
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	}()
	for {
		var m struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := conn.ReadJSON(&m); err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "watch:", err)
			return 1
		}
		switch m.Type {
		case "ping":
			_ = conn.WriteJSON(map[string]any{"type": "pong"})
		case "next":
			var p struct {
				Data struct {
					TaskUpdated json.RawMessage `json:"taskUpdated"`
				} `json:"data"`
				Errors json.RawMessage `json:"errors"`
			}
			_ = json.Unmarshal(m.Payload, &p)
			if len(p.Errors) > 0 && string(p.Errors) != "null" {
				fmt.Fprintln(os.Stderr, "watch:", string(p.Errors))
				continue
			}
			fmt.Println(string(p.Data.TaskUpdated))
		case "error":
			fmt.Fprintln(os.Stderr, "watch:", string(m.Payload))
			return 1
		case "complete":
			return 0
		}
	}
}
