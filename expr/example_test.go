package expr_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookstream/hookstream/expr"
	"github.com/hookstream/hookstream/topics"
)

func Example() {
	filter, err := expr.CompileFilter(`source == "github" && data.action == "opened"`)
	if err != nil {
		panic(err)
	}
	transform, err := expr.CompileTransform(`{"text": "PR " + data.pull_request.title + " opened by " + data.sender.login}`)
	if err != nil {
		panic(err)
	}
	env := &topics.Envelope{
		ID: "github:1", Source: "github", EventID: "1", Type: "pull_request", ReceivedAt: time.Now(),
		Data: json.RawMessage(`{"action":"opened","pull_request":{"title":"Fix the retries"},"sender":{"login":"mona"}}`),
	}
	in := expr.NewInput(env) // once per event, for every subscription
	ok, err := filter.Match(in)
	fmt.Println(ok, err)
	body, err := transform.Apply(in)
	fmt.Println(string(body), err)

	_, err = expr.CompileFilter("source == \"github\" &&\n  data.action = \"opened\"")
	fmt.Println(err)
	// Output:
	// true <nil>
	// {"text":"PR Fix the retries opened by mona"} <nil>
	// line 2, column 15: Syntax error: token recognition error at: '= '; a single = does not compare: write ==
}
