/* gate_run.c - one case run through its check (gate_run.h). */
#include "ci/checks.h"
#include "ci/gate_case.h"

fc_status gate_run_case(const gate_case *c, const gate_opts *o, gate_rows *rows, fc_err *err)
{
    if (!c->check)
        return gate_case_error(c, o, rows, "case names no check", err);
    char why[REP_WHY_LEN];
    /* A layout's layers differ in cost: its check asks for each layer (ci/checks/layout.c). */
    if (c->layout[0] || !gate_emu_skips(&c->gp, why, sizeof why))
        return c->check->run(c, o, rows, err);
    gate_opts emu = *o, rest = *o;
    emu.nbackends = rest.nbackends = 0;
    for (int i = 0; i < o->nbackends; i++) {
        gate_opts *to = o->backends[i] == GPU_BACKEND_EMU ? &emu : &rest;
        to->backends[to->nbackends++] = o->backends[i];
    }
    fc_status st = emu.nbackends ? gate_case_rows(c, &emu, rows, 1, why, err) : FC_OK;
    return st || !rest.nbackends ? st : c->check->run(c, &rest, rows, err);
}
