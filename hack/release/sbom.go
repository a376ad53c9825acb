package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"net/url"
	"strings"
	"time"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx"
	"github.com/spdx/tools-golang/spdx/v2/common"
	"github.com/spdx/tools-golang/spdxlib"
)

// SBOM is the image's software bill of materials as an SPDX 2.3 JSON
// document: the image, the operator binary in it, every Go module the
// binary was linked from (read from the binary's own build information, so
// it lists what is in the image, not what go.mod mentions), the Go standard
// library and the base layer. Everything in it derives from the build, so
// the same commit writes the same document.
func (b Build) SBOM(img *Image, repository string) ([]byte, error) {
	// Every platform links the same modules; the first one's are read.
	info, err := buildinfo.ReadFile(img.Binaries[Platforms[0].OS+"/"+Platforms[0].Architecture])
	if err != nil {
		return nil, fmt.Errorf("read the binary's build information: %w", err)
	}
	hexDigest := strings.TrimPrefix(img.Digest, "sha256:")
	doc := &spdx.Document{
		SPDXVersion:       spdx.Version,
		DataLicense:       spdx.DataLicense,
		SPDXIdentifier:    "DOCUMENT",
		DocumentName:      "openmed-operator-" + b.Version,
		DocumentNamespace: sourceURL + "/spdx/openmed-operator-" + b.Version + "-" + hexDigest,
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{
				{CreatorType: "Organization", Creator: "OpenMed"},
				{CreatorType: "Tool", Creator: "openmed-release-" + b.Version},
			},
			Created: b.Created.UTC().Format(time.RFC3339),
		},
	}
	pkg := func(id, name, version, purl, purpose string) *spdx.Package {
		p := &spdx.Package{
			PackageSPDXIdentifier:   common.ElementID(id),
			PackageName:             name,
			PackageVersion:          version,
			PackageDownloadLocation: "NOASSERTION",
			FilesAnalyzed:           false,
			PackageLicenseConcluded: "NOASSERTION",
			PackageLicenseDeclared:  "NOASSERTION",
			PackageCopyrightText:    "NOASSERTION",
			PrimaryPackagePurpose:   purpose,
		}
		if purl != "" {
			p.PackageExternalReferences = []*spdx.PackageExternalReference{{Category: "PACKAGE-MANAGER", RefType: "purl", Locator: purl}}
		}
		doc.Packages = append(doc.Packages, p)
		return p
	}
	rel := func(a, kind, b string) {
		doc.Relationships = append(doc.Relationships, &spdx.Relationship{
			RefA:         common.MakeDocElementID("", a),
			RefB:         common.MakeDocElementID("", b),
			Relationship: kind,
		})
	}

	image := pkg("Image", "openmed-operator", b.Version,
		"pkg:oci/openmed-operator@"+url.QueryEscape(img.Digest)+"?repository_url="+url.QueryEscape(repository), "CONTAINER")
	image.PackageChecksums = []common.Checksum{{Algorithm: common.SHA256, Value: hexDigest}}
	image.PackageDownloadLocation = sourceURL
	image.PackageLicenseDeclared = "Apache-2.0"
	rel("DOCUMENT", common.TypeRelationshipDescribe, "Image")

	op := pkg("Operator", info.Main.Path, b.Version, "pkg:golang/"+info.Main.Path+"@"+b.Version, "APPLICATION")
	op.PackageDownloadLocation = sourceURL
	op.PackageLicenseDeclared = "Apache-2.0"
	op.PackageComment = "commit " + b.Commit
	rel("Image", common.TypeRelationshipContains, "Operator")

	base := pkg("Base", "openmed-base", strings.TrimPrefix(baseDiffID, "sha256:")[:12], "", "OPERATING-SYSTEM")
	base.PackageComment = "the nonroot user (65532), /etc/passwd, /etc/group, /tmp and /home/nonroot; layer diffID " + baseDiffID
	rel("Image", common.TypeRelationshipContains, "Base")

	pkg("Go-stdlib", "stdlib", info.GoVersion, "pkg:golang/stdlib@"+info.GoVersion, "LIBRARY")
	rel("Operator", common.TypeRelationshipDependsOn, "Go-stdlib")
	for i, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		id := fmt.Sprintf("Go-%d", i)
		p := pkg(id, d.Path, d.Version, "pkg:golang/"+d.Path+"@"+d.Version, "LIBRARY")
		if d.Sum != "" {
			p.PackageComment = "go.sum " + d.Sum
		}
		rel("Operator", common.TypeRelationshipDependsOn, id)
	}

	if err := spdxlib.ValidateDocument(doc); err != nil {
		return nil, fmt.Errorf("the SBOM is not valid SPDX: %w", err)
	}
	var buf bytes.Buffer
	if err := spdxjson.Write(doc, &buf, spdxjson.Indent("  ")); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
