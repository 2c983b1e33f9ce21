package config

// adminToken checks admin.token_file: it protects an admin listener, and holds a token.
func (v *validator) adminToken(a *Admin) {
	switch {
	case a.TokenFile == "":
	case a.Listen == "":
		v.addf("admin.token_file", "set but admin.listen is empty: there is no admin listener to protect (got %q)", a.TokenFile)
	default:
		if _, err := a.Token(); err != nil {
			v.fileProblem("admin.token_file", a.TokenFile, err, adminTokenFormat)
		}
	}
}
