/*
 * model.h — the loaded model behind the public nx_model handle.
 * A model owns its nx_gguf (the mapping) and refers to weights as views into it. Architecture
 * modules (src/arch/) add their hyper-parameters and weight tables as they land.
 */
#ifndef NX_MODEL_H
#define NX_MODEL_H

#include "nextn.h"
#include "gguf.h"

struct nx_model {
    nx_gguf *gguf;        /* owned */
    char arch[64];        /* general.architecture */
    char name[128];       /* general.name, or the file's base name */
    nx_model_params params;
};

#endif
