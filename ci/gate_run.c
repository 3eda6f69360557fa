/* gate_run.c - one case run through its check (gate_run.h). */
#include "ci/checks.h"
#include "ci/gate_case.h"

fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err)
{
    if (!c->check)
        return gate_case_error(c, o, rows, "case names no check", err);
    return c->check->run(c, o, rows, err);
}
