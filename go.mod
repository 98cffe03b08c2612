module github.com/pibgw/pibgw

go 1.26.8
