module github.com/warren-sandbox/warren

go 1.26
