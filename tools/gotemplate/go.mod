module kmutate.dev/tools/gotemplate

go 1.22
