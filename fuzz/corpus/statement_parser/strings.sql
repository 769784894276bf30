SELECT E'tab\there', U&'d\0061t\+000061', $$dollar 'quoted'$$, $tag$x$tag$, B'101', X'ff', 1e10, .5, 0x1F -- comment
/* block /* nested */ comment */ ;;